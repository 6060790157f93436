//! The one place tasks are spawned: every task a Modelplane process runs
//! belongs to a [`Supervisor`], which stops them all on shutdown. A task that
//! returns or panics is logged; the rest keep running. A [`Scope`] is a
//! group of the supervisor's tasks that can be stopped on its own (the
//! controllers of one simulated cluster when it is deleted).

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

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tasks = self.tasks.lock().map(|t| t.len()).unwrap_or(0);
        f.debug_struct("Supervisor")
            .field("tasks", &tasks)
            .field("stopping", &self.is_stopping())
            .finish()
    }
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

    /// A group of tasks that stops with the supervisor or on its own.
    pub fn scope(&self) -> Scope {
        Scope {
            supervisor: self.clone(),
            stop: Arc::new(watch::channel(false).0),
        }
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

/// Tasks of a [`Supervisor`] that can be stopped together, before the rest.
#[derive(Clone)]
pub struct Scope {
    supervisor: Supervisor,
    stop: Arc<watch::Sender<bool>>,
}

impl Scope {
    /// Runs `task` until it ends, the scope stops or the supervisor does.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let mut stopped = self.stop.subscribe();
        self.supervisor.spawn(name, async move {
            tokio::select! {
                () = task => {}
                _ = stopped.wait_for(|stop| *stop) => {}
            }
        });
    }

    /// Stops this scope's tasks (they end at their next await).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Whether this scope was stopped.
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
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

    #[tokio::test]
    async fn a_stopped_scope_ends_its_tasks_and_no_others() {
        let supervisor = Supervisor::default();
        let scope = supervisor.scope();
        let (scoped_tx, mut scoped_rx) = tokio::sync::mpsc::channel::<()>(1);
        let (other_tx, mut other_rx) = tokio::sync::mpsc::channel::<()>(1);
        scope.spawn("scoped", async move {
            let _tx = scoped_tx;
            std::future::pending::<()>().await;
        });
        supervisor.spawn("other", async move {
            let _tx = other_tx;
            std::future::pending::<()>().await;
        });
        scope.stop();
        assert!(scoped_rx.recv().await.is_none());
        assert!(other_rx.try_recv().is_err(), "the other task still runs");
        supervisor.shutdown().await;
        assert!(other_rx.recv().await.is_none());
    }
}
