//! The data directory, owned by one process at a time and private to its
//! user.
//!
//! Two servers on one store would each deliver only their own writes to
//! their watches, and their controllers would fight over every object; so
//! the process that serves a data dir holds an exclusive lock on
//! `DIR/lock` (an advisory `flock`, released by the kernel however the
//! process ends, `kill -9` included) for as long as it runs, and a second
//! start is refused before it touches anything, naming the holder. The
//! directory is made 0700 and every file in it 0600 whatever the umask:
//! the store holds every Secret, and SQLite gives its WAL and shared
//! memory files the store's own mode.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The lock file's name in the data dir.
const LOCK: &str = "lock";

/// A data dir this process owns until the last clone is dropped.
#[derive(Clone, Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: Arc<File>,
}

/// Why a data dir cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// Another process serves it.
    #[error(
        "the data dir {dir} is in use by process {holder}; stop it first (Ctrl-C where it runs), or pass another --data-dir"
    )]
    InUse {
        /// The data dir.
        dir: PathBuf,
        /// The holder's process id, as it recorded it.
        holder: String,
    },
    /// It cannot be created, made private or locked.
    #[error("cannot use the data dir {dir}: {source}")]
    Io {
        /// The data dir.
        dir: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

impl DataDir {
    /// Creates `path` if missing, takes it for this process (or says who
    /// holds it), and makes it and everything in it private.
    pub fn lock(path: &Path) -> Result<DataDir, DataDirError> {
        let io = |source| DataDirError::Io {
            dir: path.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(path).map_err(io)?;
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path.join(LOCK))
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "(starting)".to_string(),
                    pid => pid.to_string(),
                };
                return Err(DataDirError::InUse {
                    dir: path.to_path_buf(),
                    holder,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        lock.set_len(0).map_err(io)?;
        lock.rewind().map_err(io)?;
        writeln!(lock, "{}", std::process::id()).map_err(io)?;
        make_private(path).map_err(io)?;
        Ok(DataDir {
            path: path.to_path_buf(),
            _lock: Arc::new(lock),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` in the data dir.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// `name` in the data dir, opened for appending, created owner-only.
    pub fn append(&self, name: &str) -> std::io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.join(name))
    }
}

/// The directory 0700 and each file in it 0600 (a data dir an earlier
/// version wrote under the user's umask included).
fn make_private(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::set_permissions(entry.path(), Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_taken_once_released() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DataDir::lock(dir.path()).expect("first");
        let refused = DataDir::lock(dir.path()).expect_err("second");
        assert!(
            refused
                .to_string()
                .contains(&format!("in use by process {}", std::process::id())),
            "{refused}"
        );
        drop(first);
        DataDir::lock(dir.path()).expect("free again");
    }

    #[test]
    fn an_existing_data_dir_is_made_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old = dir.path().join("state.db");
        std::fs::write(&old, "").expect("write");
        std::fs::set_permissions(&old, Permissions::from_mode(0o644)).expect("chmod");
        let _held = DataDir::lock(dir.path()).expect("lock");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(dir.path()), 0o700);
        assert_eq!(mode(&old), 0o600);
    }
}
