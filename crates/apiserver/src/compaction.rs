//! When the revision log is compacted: Kubernetes compacts etcd every 5
//! minutes, so a watch can resume from anything newer. Every
//! [`COMPACT_EVERY`] the server records the store's revision; the log is
//! compacted up to the newest revision recorded at least [`RETENTION`] ago.
//! Under any steady write load the log then holds at most about
//! `(RETENTION + COMPACT_EVERY) × rate` changes beside the live objects.
//! Time is an input, so the policy is the same in the server (its clock) and
//! in the harness that measures it (a simulated one).

use std::collections::VecDeque;
use std::time::Duration;

use crate::Revision;

/// History kept for watches to resume from.
pub const RETENTION: Duration = Duration::from_secs(5 * 60);
/// How often the server looks at the log.
pub const COMPACT_EVERY: Duration = Duration::from_secs(60);

/// The revisions seen and when, until they are old enough to compact.
#[derive(Debug)]
pub struct Retention {
    window: Duration,
    seen: VecDeque<(Duration, Revision)>,
}

impl Retention {
    /// Keeps `window` of history.
    pub fn new(window: Duration) -> Retention {
        Retention {
            window,
            seen: VecDeque::new(),
        }
    }

    /// Records that the store was at `revision` at `now` (time since some
    /// fixed start); returns the revision to compact up to, if one is old
    /// enough.
    pub fn observe(&mut self, now: Duration, revision: Revision) -> Option<Revision> {
        self.seen.push_back((now, revision));
        let mut old_enough = None;
        while let Some((at, rev)) = self.seen.front().copied() {
            if now.saturating_sub(at) < self.window {
                break;
            }
            old_enough = Some(rev);
            self.seen.pop_front();
        }
        old_enough
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_older_than_the_window_is_compacted() {
        let mut retention = Retention::new(RETENTION);
        let minute = |m: i64| Duration::from_secs(60 * m.unsigned_abs());
        for m in 0..5 {
            assert_eq!(retention.observe(minute(m), 100 * m), None, "minute {m}");
        }
        assert_eq!(retention.observe(minute(5), 500), Some(0));
        assert_eq!(retention.observe(minute(6), 600), Some(100));
        // A pause: everything recorded 5 minutes before goes at once.
        assert_eq!(retention.observe(minute(20), 700), Some(600));
    }
}
