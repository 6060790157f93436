//! The data directory, owned by one process at a time and private to its
//! user.
//!
//! Two servers on one store would each deliver only their own writes to
//! their watches, and their controllers would fight over every object; so
//! the process that serves a data dir holds an exclusive lock on
//! `DIR/lock` (an advisory `flock`, released by the kernel however the
//! process ends, `kill -9` included) for as long as it runs, and a second
//! start is refused before it touches anything, naming the holder. A data
//! dir it creates is 0700, and every file Modelplane writes there 0600
//! whatever the umask: the store holds every Secret, and SQLite gives its
//! WAL and shared memory files the store's own mode. A directory that
//! exists already keeps its mode, and only Modelplane's own files in it
//! are touched (`--data-dir .` must not change the user's files).

use std::fs::{File, OpenOptions, Permissions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
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
        // Created owner-only (not under the umask); an existing directory
        // keeps its mode — it may be the user's own (`--data-dir .`) — and
        // what Modelplane writes in it is made owner-only file by file.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(io)?;
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

/// What Modelplane writes in a data dir: only these are made owner-only
/// (one an earlier version wrote under the user's umask included), never
/// anything else a directory the user named holds.
const OWN_FILES: [&str; 9] = [
    LOCK,
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "token",
    "tls.crt",
    "tls.key",
    "kubeconfig",
    "modelplane.log",
];

fn make_private(dir: &Path) -> std::io::Result<()> {
    for name in OWN_FILES {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_file() => {
                std::fs::set_permissions(&path, Permissions::from_mode(0o600))?;
            }
            _ => {}
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
    fn modelplanes_files_are_made_private_and_nothing_else_is_touched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        let fresh = dir.path().join("new");
        drop(DataDir::lock(&fresh).expect("lock"));
        assert_eq!(mode(&fresh), 0o700, "a data dir it creates is owner-only");
        // A directory of the user's (`--data-dir .`) with their own files.
        std::fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).expect("chmod");
        let old = dir.path().join("state.db");
        let script = dir.path().join("run.sh");
        for (path, m) in [(&old, 0o644), (&script, 0o755)] {
            std::fs::write(path, "").expect("write");
            std::fs::set_permissions(path, Permissions::from_mode(m)).expect("chmod");
        }
        let _held = DataDir::lock(dir.path()).expect("lock");
        assert_eq!(mode(&old), 0o600);
        assert_eq!(mode(&script), 0o755, "the user's file is left alone");
        assert_eq!(
            mode(dir.path()),
            0o755,
            "the user's directory is left alone"
        );
    }
}
