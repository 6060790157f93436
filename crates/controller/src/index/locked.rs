//! The index behind its lock, counting the writes: a plan read from it is
//! still the plan it would make while the count has not moved.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LockResult, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::Index;

/// The index, locked, with how many times it has been written.
#[derive(Default)]
pub struct Locked {
    index: RwLock<Index>,
    writes: AtomicU64,
}

impl Locked {
    /// Reads it.
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, Index>> {
        self.index.read()
    }

    /// Writes it (counted once held: nothing read meanwhile sees the
    /// write and the old count).
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, Index>> {
        let guard = self.index.write();
        self.writes.fetch_add(1, Ordering::SeqCst);
        guard
    }

    /// How many times it has been written.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
}
