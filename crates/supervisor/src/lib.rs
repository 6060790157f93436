//! The one place tasks are spawned: every task a Modelplane process runs
//! belongs to a [`Supervisor`], which stops them all on shutdown. A task that
//! returns or panics is logged; the rest keep running. A [`Scope`] is a
//! group of the supervisor's tasks that can be stopped on its own (the
//! controllers of one simulated cluster when it is deleted).
//!
//! Failure policy: a task spawned as critical ([`Supervisor::spawn_critical`])
//! is one the process cannot run without (an API server, the controllers,
//! a listener); if it ends (or panics) before shutdown began, its error is the
//! process's [`Supervisor::failure`], which its owner waits on to stop with
//! that error instead of running half up.
//!
//! Shutdown has two phases: the front tasks ([`Supervisor::spawn_front`],
//! the listeners clients talk to) are told to drain and are waited for,
//! then every other task stops — so a gateway's streams finish while the
//! engines behind them still run.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinSet;

/// Owns every task and their shutdown.
#[derive(Clone)]
pub struct Supervisor {
    tasks: Arc<Mutex<JoinSet<()>>>,
    /// The front tasks, drained before the rest stop.
    front: Arc<Mutex<JoinSet<()>>>,
    stop: watch::Sender<bool>,
    drain: watch::Sender<bool>,
    /// The first critical task's failure.
    failure: watch::Sender<Option<String>>,
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
            front: Arc::default(),
            stop: watch::channel(false).0,
            drain: watch::channel(false).0,
            failure: watch::channel(None).0,
        }
    }
}

impl Supervisor {
    /// Runs `task` until it ends or the supervisor stops.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.spawn_into(&self.tasks, name, task);
    }

    /// Runs `task`, which the process cannot do without, until the
    /// supervisor stops; if it ends before shutdown began, its error (or
    /// `"<name> stopped"`) becomes the supervisor's [`failure`](Self::failure).
    pub fn spawn_critical<E: std::fmt::Display>(
        &self,
        name: &'static str,
        task: impl Future<Output = Result<(), E>> + Send + 'static,
    ) {
        let me = self.clone();
        self.spawn(name, async move {
            let ended = unwinding(name, task).await;
            me.ended(name, ended);
        });
    }

    /// Runs a front task (a listener clients talk to): `task` is given the
    /// signal to drain, and shutdown waits for it to end before stopping
    /// the other tasks. Critical like [`spawn_critical`](Self::spawn_critical)
    /// until the drain begins.
    pub fn spawn_front<F, E>(&self, name: &'static str, task: impl FnOnce(Draining) -> F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let me = self.clone();
        let task = task(Draining::new(self.drain.subscribe()));
        self.spawn_into(&self.front, name, async move {
            let ended = unwinding(name, task).await;
            me.ended(name, ended);
        });
    }

    /// Records a critical task's end as the failure, unless shutdown began.
    fn ended<E: std::fmt::Display>(&self, name: &'static str, ended: Result<(), E>) {
        if self.is_stopping() || *self.drain.borrow() {
            return;
        }
        let message = match ended {
            Err(e) => e.to_string(),
            Ok(()) => format!("{name} stopped"),
        };
        tracing::error!(task = name, "{message}");
        self.failure
            .send_if_modified(|first| first.is_none().then(|| *first = Some(message)).is_some());
    }

    /// The first critical task's failure: resolves once one ended before
    /// shutdown (never, if none does).
    pub fn failure(&self) -> impl Future<Output = String> + Send + 'static {
        let mut failure = self.failure.subscribe();
        async move {
            let first = failure
                .wait_for(Option::is_some)
                .await
                .map(|message| message.clone().unwrap_or_default());
            match first {
                Ok(message) => message,
                Err(_) => std::future::pending().await,
            }
        }
    }

    fn spawn_into(
        &self,
        set: &Mutex<JoinSet<()>>,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut stopped = self.stop.subscribe();
        let Ok(mut tasks) = set.lock() else {
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

    /// Drains the front tasks and waits for them, then stops every other
    /// task and waits for them to end.
    pub async fn shutdown(&self) {
        self.drain.send_replace(true);
        let front = self
            .front
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let mut front = front;
        while front.join_next().await.is_some() {}
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

/// `task`'s result, or its panic as an error: a critical task that panics
/// is a failure as much as one that returns. Caught on the task itself, so
/// the supervisor still owns and awaits it at shutdown.
async fn unwinding<E: std::fmt::Display>(
    name: &'static str,
    task: impl Future<Output = Result<(), E>> + Send + 'static,
) -> Result<(), String> {
    match (CatchUnwind(Box::pin(task))).await {
        Ok(ended) => ended.map_err(|e| e.to_string()),
        Err(payload) => {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("{name} panicked: {why}"))
        }
    }
}

/// A future whose panic is its output (`Err` with the payload): what
/// `futures::FutureExt::catch_unwind` does, in the few lines it takes.
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(output)) => std::task::Poll::Ready(Ok(output)),
            Err(payload) => std::task::Poll::Ready(Err(payload)),
        }
    }
}

/// The signal a front task drains on: resolves once shutdown begins.
pub struct Draining(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>);

impl Draining {
    fn new(mut drain: watch::Receiver<bool>) -> Draining {
        Draining(Box::pin(async move {
            // Closed: the supervisor is gone, so is the process.
            let _ = drain.wait_for(|drain| *drain).await;
        }))
    }
}

impl Future for Draining {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.0.as_mut().poll(cx)
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

    #[tokio::test]
    async fn a_critical_task_that_ends_is_the_failure_and_one_ending_at_shutdown_is_not() {
        let supervisor = Supervisor::default();
        supervisor.spawn_critical("apiserver", async { Err::<(), _>("the port is taken") });
        assert_eq!(supervisor.failure().await, "the port is taken");
        supervisor.spawn_critical("later", async { Err::<(), _>("second") });
        tokio::task::yield_now().await;
        assert_eq!(
            supervisor.failure().await,
            "the port is taken",
            "the first one wins"
        );

        let quiet = Supervisor::default();
        let stopping = quiet.stopping();
        quiet.spawn_critical("serves", async move {
            stopping.await;
            Ok::<(), String>(())
        });
        quiet.shutdown().await;
        let failed = tokio::time::timeout(std::time::Duration::from_millis(50), quiet.failure());
        assert!(
            failed.await.is_err(),
            "a task ending at shutdown is no failure"
        );
    }

    #[tokio::test]
    async fn a_critical_task_that_panics_is_the_failure() {
        let supervisor = Supervisor::default();
        supervisor.spawn_critical("controllers", async { poisoned() });
        assert_eq!(
            supervisor.failure().await,
            "controllers panicked: the index is poisoned"
        );
    }

    fn poisoned() -> Result<(), String> {
        panic!("the index is poisoned")
    }

    #[tokio::test]
    async fn shutdown_returns_once_critical_tasks_have_stopped() {
        let supervisor = Supervisor::default();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        supervisor.spawn_critical("forever", async move {
            let _tx = tx;
            std::future::pending::<Result<(), String>>().await
        });
        supervisor.shutdown().await;
        assert!(
            matches!(
                rx.try_recv(),
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)
            ),
            "stopped before shutdown returned"
        );
    }

    #[tokio::test]
    async fn front_tasks_drain_before_the_rest_stop() {
        let supervisor = Supervisor::default();
        let (backend_tx, mut backend_rx) = tokio::sync::mpsc::channel::<()>(1);
        supervisor.spawn("engine", async move {
            let _tx = backend_tx;
            std::future::pending::<()>().await;
        });
        let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
        supervisor.spawn_front("gateway", |draining| async move {
            draining.await;
            // Still draining: what is behind it still runs.
            let _ = seen_tx.send(backend_rx.try_recv().is_err());
            Ok::<(), String>(())
        });
        supervisor.shutdown().await;
        assert_eq!(
            seen_rx.await,
            Ok(true),
            "the engine ran while the gateway drained"
        );
    }
}
