//! The one place tasks are spawned: every task the controller runs belongs
//! to a [`Supervisor`], which stops them all on shutdown. A task that
//! returns or panics is logged; the rest keep running.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinSet;

/// Owns every task and their shutdown.
#[derive(Clone)]
pub struct Supervisor {
    tasks: Arc<Mutex<JoinSet<()>>>,
    stop: watch::Sender<bool>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor {
            tasks: Arc::default(),
            stop: watch::channel(false).0,
        }
    }
}

impl Supervisor {
    /// Runs `task` until it ends or the supervisor stops.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let mut stopped = self.stop.subscribe();
        let Ok(mut tasks) = self.tasks.lock() else {
            return;
        };
        // Reap what already ended, so the set does not grow with
        // short-lived tasks.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            tokio::select! {
                () = task => tracing::debug!(task = name, "task ended"),
                _ = stopped.wait_for(|stop| *stop) => {}
            }
        });
    }

    /// A signal that resolves once shutdown begins.
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.stop.subscribe();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Stops every task and waits for them to end.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let tasks = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let mut tasks = tasks;
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_stops_every_task() {
        let supervisor = Supervisor::default();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        for _ in 0..3 {
            let tx = tx.clone();
            supervisor.spawn("forever", async move {
                let _tx = tx;
                std::future::pending::<()>().await;
            });
        }
        drop(tx);
        supervisor.shutdown().await;
        // Every task dropped its sender.
        assert!(rx.recv().await.is_none());
    }
}
