//! The processes of one server: a server started with `sidecar serve --processes N --uds PATH`
//! listens on one Unix socket per process, `PATH.0` ... `PATH.{N-1}` (Linux does not spread
//! connections to one Unix socket over several processes, as SO_REUSEPORT does for TCP).
//!
//! Given `unix:PATH`, the client uses `PATH` when that socket exists; otherwise it lists the
//! directory once, when it is built, and takes every `PATH.<digits>` as one process (in index
//! order; none found: `PATH` itself, dialed lazily as usual). A TCP target is one member: the
//! kernel spreads its connections, and one HTTP/2 connection stays with one process.
//!
//! Each process is a [`Member`] with its own channel, reconnect state and (with multiplex on) its
//! own pool of streams). Calls go round robin over the members whose channel is not suspect
//! (with multiplex on: to the one whose stream is gathering a message, else where fewest calls
//! wait); a member whose call failed UNAVAILABLE is skipped, and probed in the background (a
//! fresh channel
//! and a health check, at most every [`PROBE_INTERVAL`]) until it answers SERVING again, then
//! used again. A call that fails UNAVAILABLE on one member is made once more on another healthy
//! one within its deadline (every Tokenize, Detokenize, Render and unary call is idempotent).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tonic::{Code, Status};

use crate::carrier::{CallFuture, Carrier};
use crate::connection::{deadline_after, Connections};
use crate::target::Target;

/// How often at most a skipped (suspect) member gets a background health check.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// The sockets of the processes behind `target` (see the module docs).
pub(crate) fn discover(target: &Target) -> Vec<Target> {
    let Target::Unix(path) = target else {
        return vec![target.clone()];
    };
    if path.exists() {
        return vec![target.clone()];
    }
    let members = process_sockets(path);
    if members.is_empty() {
        return vec![target.clone()];
    }
    members.into_iter().map(Target::Unix).collect()
}

/// `PATH.<digits>` next to `path`, by index.
fn process_sockets(path: &Path) -> Vec<PathBuf> {
    let (Some(name), dir) = (path.file_name().and_then(|n| n.to_str()), path.parent()) else {
        return Vec::new();
    };
    let dir = match dir {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let file = entry.file_name();
            let index = file.to_str()?.strip_prefix(name)?.strip_prefix('.')?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((index.parse().ok()?, path.with_file_name(file)))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// One process: its connection and what carries its calls.
#[derive(Debug)]
pub(crate) struct Member {
    pub connections: Arc<Connections>,
    pub carrier: Arc<dyn Carrier>,
    probing: Arc<AtomicBool>,
    last_probe: Mutex<Option<Instant>>,
}

impl Member {
    pub fn new(connections: Arc<Connections>, carrier: Arc<dyn Carrier>) -> Member {
        Member {
            connections,
            carrier,
            probing: Arc::new(AtomicBool::new(false)),
            last_probe: Mutex::new(None),
        }
    }

    fn healthy(&self) -> bool {
        !self.connections.is_suspect()
    }

    /// A background health check of a suspect member (one at a time, at most every
    /// `PROBE_INTERVAL`): when it answers SERVING, the member's channel is fresh and unsuspected,
    /// and calls go to it again.
    fn probe(&self) {
        {
            let mut last = self
                .last_probe
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let now = Instant::now();
            if last.is_some_and(|at| now < at + PROBE_INTERVAL) {
                return;
            }
            if self.probing.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(now);
        }
        let connections = self.connections.clone();
        let probing = self.probing.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + connections.settings.health_timeout;
            let _ = connections.ready(Some(deadline)).await;
            probing.store(false, Ordering::Release);
        });
    }
}

/// A call on one member: the message and the time left.
pub(crate) type OnMember<M, T> = for<'m> fn(&'m Member, M, Option<Duration>) -> CallFuture<'m, T>;

/// The members of one server and the round robin over them.
#[derive(Debug)]
pub(crate) struct Fleet {
    pub members: Vec<Member>,
    next: AtomicUsize,
}

impl Fleet {
    pub fn new(members: Vec<Member>) -> Fleet {
        assert!(!members.is_empty(), "a fleet has at least one member");
        Fleet {
            members,
            next: AtomicUsize::new(0),
        }
    }

    /// The next healthy member after round robin, other than `except`; suspect members on the
    /// way get a background probe. None when no other member is healthy.
    fn healthy_after(&self, start: usize, except: Option<usize>) -> Option<usize> {
        let n = self.members.len();
        (0..n).map(|k| (start + k) % n).find(|&i| {
            if Some(i) == except {
                return false;
            }
            let member = &self.members[i];
            if member.healthy() {
                return true;
            }
            member.probe();
            false
        })
    }

    /// The member for the next call: among the healthy ones, the least busy when their carriers
    /// say (multiplex: a call joins a message being gathered rather than splitting it, else goes
    /// where fewest calls wait), round robin otherwise and between equals; when none is healthy,
    /// the next in turn (its own reconnect then runs inline).
    pub fn pick(&self) -> usize {
        let n = self.members.len();
        if n == 1 {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let Some(first) = self.healthy_after(start, None) else {
            return start;
        };
        let Some(mut least) = self.members[first].carrier.load() else {
            return first;
        };
        let mut best = first;
        for k in 1..n {
            let i = (first + k) % n;
            let member = &self.members[i];
            if !member.healthy() {
                continue;
            }
            if let Some(load) = member.carrier.load().filter(|&load| load < least) {
                (best, least) = (i, load);
            }
        }
        best
    }

    /// Runs `call` on a picked member; on UNAVAILABLE, once more on another healthy member within
    /// the deadline (`timeout` from now).
    pub async fn call<M: Clone, T>(
        &self,
        message: M,
        timeout: Option<Duration>,
        call: OnMember<M, T>,
    ) -> Result<T, Status> {
        let first = self.pick();
        if self.members.len() == 1 {
            return call(&self.members[first], message, timeout).await;
        }
        let deadline = deadline_after(timeout);
        let failure = match call(&self.members[first], message.clone(), timeout).await {
            Err(status) if status.code() == Code::Unavailable => status,
            other => return other,
        };
        let Some(other) = self.healthy_after(first + 1, Some(first)) else {
            return Err(failure);
        };
        let left = match deadline {
            None => None,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(failure);
                }
                Some(left)
            }
        };
        call(&self.members[other], message, left).await
    }

    /// Channels re-established after failures, over every member.
    pub fn reconnects(&self) -> u64 {
        self.members
            .iter()
            .map(|m| m.connections.reconnects())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_sockets_are_found_by_index() {
        let dir = std::env::temp_dir().join(format!("fleet-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "s.sock.0",
            "s.sock.10",
            "s.sock.2",
            "s.sock.x",
            "s.sock.",
            "other.1",
        ] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let base = dir.join("s.sock");
        let found = discover(&Target::Unix(base.clone()));
        let expected: Vec<Target> = ["s.sock.0", "s.sock.2", "s.sock.10"]
            .iter()
            .map(|n| Target::Unix(dir.join(n)))
            .collect();
        assert_eq!(found, expected);
        // The path itself, when it exists, is one server.
        std::fs::write(&base, b"").unwrap();
        assert_eq!(discover(&Target::Unix(base.clone())), [Target::Unix(base)]);
        // Nothing there: the path, dialed as usual.
        let missing = Target::Unix(dir.join("missing.sock"));
        assert_eq!(discover(&missing), std::slice::from_ref(&missing));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
