//! The work queue: each subject at most once in the queue and at most once
//! in flight (a subject changed while it reconciles runs again after), and
//! retries after a delay that doubles per failure, up to a cap.
//!
//! Urgent work goes first, in a lane of its own, as controller-runtime
//! gives each controller its own queue: a cluster's next step (its cloud
//! cluster Ready, its stack installed) does not wait behind a hundred
//! deployments each finding again that no cluster is Ready yet. The rest
//! still gets every few turns, so it never starves.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// First retry delay after a failure.
pub const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Longest retry delay.
pub const MAX_RETRY: Duration = Duration::from_secs(60);

/// Urgent items taken in a row while other work waits.
pub const URGENT_IN_A_ROW: usize = 4;

struct State<T> {
    /// Queued urgent items, in order.
    urgent: VecDeque<T>,
    /// Queued other items, in order.
    ready: VecDeque<T>,
    /// Urgent items taken since the last other one.
    in_a_row: usize,
    queued: HashSet<T>,
    in_flight: HashSet<T>,
    /// Changed while in flight: queue again when done.
    dirty: HashSet<T>,
    /// Failures in a row, for the backoff.
    failures: std::collections::HashMap<T, u32>,
    /// Retries due, by time: at most one per item (an item that fails
    /// again before its retry is due keeps the earlier one), or each run a
    /// change starts would add a retry that runs, fails and adds another.
    later: BTreeMap<(Instant, u64), T>,
    /// Each waiting item's key in `later`.
    waiting: std::collections::HashMap<T, (Instant, u64)>,
    sequence: u64,
}

impl<T: Clone + Eq + Hash> State<T> {
    /// Queues `item` in its lane unless it is queued already; whether it
    /// was.
    fn enqueue(&mut self, item: T, urgent: fn(&T) -> bool) -> bool {
        if !self.queued.insert(item.clone()) {
            return false;
        }
        if urgent(&item) {
            self.urgent.push_back(item);
        } else {
            self.ready.push_back(item);
        }
        true
    }

    /// The next queued item: urgent first, but never more than
    /// [`URGENT_IN_A_ROW`] of them while another waits.
    fn dequeue(&mut self) -> Option<T> {
        let other_turn = self.in_a_row >= URGENT_IN_A_ROW || self.urgent.is_empty();
        let item = if other_turn {
            self.ready.pop_front().or_else(|| self.urgent.pop_front())
        } else {
            self.urgent.pop_front()
        }?;
        // Counted only while other work waits: the count says how long
        // it has waited.
        self.in_a_row = if other_turn || self.ready.is_empty() {
            0
        } else {
            self.in_a_row + 1
        };
        self.queued.remove(&item);
        Some(item)
    }

    /// Runs `item` again at `at`, unless it is due earlier already.
    fn retry_at(&mut self, item: T, at: Instant) {
        if let Some(&key) = self.waiting.get(&item) {
            if key.0 <= at {
                return;
            }
            self.later.remove(&key);
        }
        self.sequence += 1;
        let key = (at, self.sequence);
        self.later.insert(key, item.clone());
        self.waiting.insert(item, key);
    }
}

/// A deduplicating work queue with backoff.
pub struct Queue<T> {
    state: Mutex<State<T>>,
    wake: Notify,
    /// Whether an item goes in the urgent lane.
    urgent: fn(&T) -> bool,
}

impl<T: Clone + Eq + Hash> Default for Queue<T> {
    fn default() -> Self {
        Queue::prioritizing(|_| false)
    }
}

impl<T: Clone + Eq + Hash> Queue<T> {
    /// A queue taking the items `urgent` picks first.
    pub fn prioritizing(urgent: fn(&T) -> bool) -> Self {
        Queue {
            urgent,
            state: Mutex::new(State {
                urgent: VecDeque::new(),
                ready: VecDeque::new(),
                in_a_row: 0,
                queued: HashSet::new(),
                in_flight: HashSet::new(),
                dirty: HashSet::new(),
                failures: std::collections::HashMap::new(),
                later: BTreeMap::new(),
                waiting: std::collections::HashMap::new(),
                sequence: 0,
            }),
            wake: Notify::new(),
        }
    }

    /// Queues `item` unless it is queued already.
    pub fn add(&self, item: T) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if state.in_flight.contains(&item) {
            state.dirty.insert(item);
            return;
        }
        if state.enqueue(item, self.urgent) {
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Queues `item` once `delay` has passed (unless it runs before then).
    pub fn add_after(&self, item: T, delay: Duration) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.retry_at(item, Instant::now() + delay);
        drop(state);
        self.wake.notify_one();
    }

    /// Items queued or waiting for a retry.
    pub fn depth(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.urgent.len() + s.ready.len() + s.later.len())
            .unwrap_or(0)
    }

    /// The next item to work on; waits for one. The caller reports the
    /// outcome with [`Queue::done`].
    pub async fn next(&self) -> T {
        loop {
            let notified = self.wake.notified();
            let due = {
                let Ok(mut state) = self.state.lock() else {
                    notified.await;
                    continue;
                };
                let now = Instant::now();
                while let Some(entry) = state.later.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let item = entry.remove();
                    state.waiting.remove(&item);
                    if state.in_flight.contains(&item) {
                        // Never twice at once: again once it is done.
                        state.dirty.insert(item);
                    } else {
                        state.enqueue(item, self.urgent);
                    }
                }
                if let Some(item) = state.dequeue() {
                    state.in_flight.insert(item.clone());
                    return item;
                }
                state.later.keys().next().map(|(at, _)| *at)
            };
            match due {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Reports how `item` went: a failure retries it after a backoff.
    pub fn done(&self, item: &T, failed: bool) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.in_flight.remove(item);
        if failed {
            let failures = state.failures.entry(item.clone()).or_insert(0);
            *failures = failures.saturating_add(1);
            let delay = backoff(*failures);
            state.retry_at(item.clone(), Instant::now() + delay);
        } else {
            state.failures.remove(item);
        }
        if state.dirty.remove(item) {
            state.enqueue(item.clone(), self.urgent);
        }
        drop(state);
        self.wake.notify_one();
    }
}

/// The delay before retry number `failures`.
pub fn backoff(failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    FIRST_RETRY.saturating_mul(factor).min(MAX_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_item_is_queued_once_and_runs_again_if_changed_in_flight() {
        let queue = Queue::default();
        queue.add("a");
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.depth(), 2);
        assert_eq!(queue.next().await, "a");
        queue.add("a");
        assert_eq!(queue.next().await, "b");
        queue.done(&"a", false);
        assert_eq!(queue.next().await, "a", "changed while in flight: again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_retries_after_a_doubling_backoff() {
        let queue = Queue::default();
        queue.add("a");
        let item = queue.next().await;
        let start = Instant::now();
        queue.done(&item, true);
        let item = queue.next().await;
        assert_eq!(start.elapsed(), FIRST_RETRY);
        queue.done(&item, true);
        queue.next().await;
        assert_eq!(start.elapsed(), FIRST_RETRY * 3);
        assert_eq!(backoff(40), MAX_RETRY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_item_has_one_retry_waiting_however_often_it_ran() {
        let queue = Queue::default();
        for _ in 0..5 {
            // Each run started by a change, not by the retry.
            queue.add("a");
            let item = queue.next().await;
            queue.done(&item, true);
        }
        assert_eq!(queue.depth(), 1, "one retry waits, not one per failure");
        let start = Instant::now();
        queue.next().await;
        assert_eq!(start.elapsed(), backoff(1), "the earliest one");
    }

    /// The next `n` items, each done as it is taken, in the order taken.
    async fn run(queue: &Queue<String>, n: usize) -> Vec<String> {
        let mut order = Vec::new();
        for _ in 0..n {
            let item = queue.next().await;
            queue.done(&item, false);
            order.push(item);
        }
        order
    }

    #[tokio::test]
    async fn urgent_work_goes_first_and_the_rest_still_gets_its_turn() {
        let queue = Queue::prioritizing(|item: &String| item.starts_with("fleet"));
        for name in ["model-a", "model-b", "model-c"] {
            queue.add(name.to_string());
        }
        for i in 0..9 {
            queue.add(format!("fleet-{i}"));
        }
        let order = run(&queue, 12).await;
        assert_eq!(
            order,
            [
                "fleet-0", "fleet-1", "fleet-2", "fleet-3", "model-a", "fleet-4", "fleet-5",
                "fleet-6", "fleet-7", "model-b", "fleet-8", "model-c"
            ],
            "queued later, fleet work runs first, but never more than {URGENT_IN_A_ROW} in a row while other work waits"
        );
    }

    #[tokio::test]
    async fn the_rest_waits_behind_at_most_four_urgent_items_whenever_it_arrives() {
        let queue = Queue::prioritizing(|item: &String| item.starts_with("fleet"));
        for i in 0..9 {
            queue.add(format!("fleet-{i}"));
        }
        let first = queue.next().await;
        queue.done(&first, false);
        queue.add("model".to_string());
        let order = run(&queue, 5).await;
        assert_eq!(
            order,
            ["fleet-1", "fleet-2", "fleet-3", "fleet-4", "model"],
            "four urgent items since it arrived, then its turn"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_due_while_its_item_runs_waits_for_it_to_finish() {
        let queue = Queue::default();
        queue.add_after("a", Duration::from_secs(1));
        queue.add("a");
        let item = queue.next().await;
        tokio::time::advance(Duration::from_secs(2)).await;
        let again = tokio::time::timeout(Duration::from_secs(1), queue.next()).await;
        assert!(again.is_err(), "a runs already: not twice at once");
        queue.done(&item, false);
        assert_eq!(queue.next().await, "a", "and again once it finished");
    }
}
