//! The processes of one server: a server started with `sidecar serve --processes N --uds PATH`
//! listens on one Unix socket per process, `PATH.0` ... `PATH.{N-1}` (Linux does not spread
//! connections to one Unix socket over several processes, as SO_REUSEPORT does for TCP).
//!
//! Given `unix:PATH`, the client uses `PATH` when that socket exists; otherwise it lists the
//! directory and takes every `PATH.<digits>` as one process (in index order; none found: `PATH`
//! itself, dialed lazily as usual). It looks again ([`Fleet::refresh`]) at its first call, after
//! a call failed UNAVAILABLE (at most every 250 ms) and at intervals doubling up to 30 s: sockets
//! that appeared and accept a connection join (a server started after the client was built, a
//! process that was restarting when `connect` ran), members whose socket is gone leave, and a
//! `PATH` that refuses connections (left by an earlier single-process run) gives way to the
//! `PATH.N` next to it. A TCP target is one member: the kernel spreads its connections, and one
//! HTTP/2 connection stays with one process.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
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

/// Makes the member of one process socket (the client's settings).
pub(crate) type MakeMember = Box<dyn Fn(Target) -> Option<Member> + Send + Sync>;

/// The shortest and the longest wait between two looks at the process sockets.
pub(crate) const RESCAN: (Duration, Duration) =
    (Duration::from_millis(250), Duration::from_secs(30));

/// Looks at the process sockets behind a `unix:PATH` target again (see [`Fleet::refresh`]).
pub(crate) struct Discovery {
    base: PathBuf,
    make: MakeMember,
    scan: Mutex<Scan>,
    scanning: AtomicBool,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Scan {
    /// When the sockets were last looked at (None: not since the client was built).
    last: Option<Instant>,
    /// Wait after `last` before the next look (doubles while nothing changes).
    interval: Duration,
}

impl Discovery {
    /// `scanned`: the sockets were just looked at (with probes, as `connect` does).
    pub fn new(base: PathBuf, make: MakeMember, scanned: bool) -> Discovery {
        Discovery {
            base,
            make,
            scan: Mutex::new(Scan {
                last: scanned.then(Instant::now),
                interval: RESCAN.0,
            }),
            scanning: AtomicBool::new(false),
        }
    }
}

/// Resets `scanning` when a look is over, or its future dropped.
struct Scanning<'a>(&'a AtomicBool);

impl Drop for Scanning<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Whether nothing accepts a connection on the socket at `path` (none there, or a socket left by
/// a process that is gone). A connection that takes longer than 100 ms (the listen backlog full)
/// counts as an answer.
async fn refuses(path: &Path) -> bool {
    let dial = tokio::net::UnixStream::connect(path);
    matches!(
        tokio::time::timeout(Duration::from_millis(100), dial).await,
        Ok(Err(_))
    )
}

/// The process sockets behind `base` that answer, or that are members already (`current`; their
/// own health checks deal with a process that is down): `base` itself when it answers or there
/// is no `base.<digits>`, else every `base.<digits>` (a `base` left by an earlier single-process
/// run does not hide them). None when nothing answers (the caller keeps what it has).
pub(crate) async fn scan(base: &Path, current: &[Target]) -> Option<Vec<Target>> {
    let numbered = process_sockets(base);
    let whole = Target::Unix(base.to_path_buf());
    let candidates = if numbered.is_empty() || (base.exists() && !refuses(base).await) {
        vec![whole]
    } else {
        numbered.into_iter().map(Target::Unix).collect()
    };
    let mut found = Vec::new();
    for candidate in candidates {
        let Target::Unix(path) = &candidate else {
            continue;
        };
        if current.contains(&candidate) || !refuses(path).await {
            found.push(candidate);
        }
    }
    (!found.is_empty()).then_some(found)
}

/// The members of one server and the round robin over them.
#[derive(Debug)]
pub(crate) struct Fleet {
    members: RwLock<Arc<Vec<Arc<Member>>>>,
    next: AtomicUsize,
    /// For a `unix:PATH` target: how to look for its process sockets again.
    discovery: Option<Discovery>,
    /// Reconnects of members no longer in the fleet.
    retired_reconnects: AtomicU64,
}

impl Fleet {
    pub fn new(members: Vec<Member>, discovery: Option<Discovery>) -> Fleet {
        assert!(!members.is_empty(), "a fleet has at least one member");
        Fleet {
            members: RwLock::new(Arc::new(members.into_iter().map(Arc::new).collect())),
            next: AtomicUsize::new(0),
            discovery,
            retired_reconnects: AtomicU64::new(0),
        }
    }

    /// The members now (the set changes when the process sockets do).
    pub fn members(&self) -> Arc<Vec<Arc<Member>>> {
        self.members
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Looks at the process sockets again when it is time: at most every 250 ms after a call
    /// failed UNAVAILABLE (`failed`), else at intervals doubling from 250 ms to 30 s while
    /// nothing changes (and at the first call of a client that was built without looking).
    /// A socket that appeared and answers becomes a member (a process that was restarting when
    /// the client connected, a server started after the client was built), a member whose
    /// socket is gone leaves, a `PATH` that refuses gives way to the `PATH.N` next to it.
    pub async fn refresh(&self, failed: bool) {
        let Some(discovery) = &self.discovery else {
            return;
        };
        {
            let mut scan = discovery
                .scan
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if failed {
                scan.interval = RESCAN.0;
            }
            if scan
                .last
                .is_some_and(|last| Instant::now() < last + scan.interval)
            {
                return;
            }
            if discovery.scanning.swap(true, Ordering::AcqRel) {
                return;
            }
            scan.last = Some(Instant::now());
        }
        let _scanning = Scanning(&discovery.scanning);
        let current = self.members();
        let targets: Vec<Target> = current
            .iter()
            .map(|m| m.connections.settings.target.clone())
            .collect();
        let changed = match scan(&discovery.base, &targets).await {
            Some(found) if found != targets => {
                let members: Vec<Arc<Member>> = found
                    .into_iter()
                    .filter_map(|target| match targets.iter().position(|t| *t == target) {
                        Some(i) => Some(current[i].clone()),
                        None => (discovery.make)(target).map(Arc::new),
                    })
                    .collect();
                let gone: u64 = current
                    .iter()
                    .filter(|m| !members.iter().any(|kept| Arc::ptr_eq(m, kept)))
                    .map(|m| m.connections.reconnects())
                    .sum();
                if members.is_empty() {
                    false
                } else {
                    self.retired_reconnects.fetch_add(gone, Ordering::Relaxed);
                    *self
                        .members
                        .write()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(members);
                    true
                }
            }
            _ => false,
        };
        let mut scan = discovery
            .scan
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        scan.last = Some(Instant::now());
        scan.interval = if changed || failed {
            RESCAN.0
        } else {
            (scan.interval * 2).min(RESCAN.1)
        };
    }

    /// The next healthy member of `members` after round robin, other than `except`; suspect
    /// members on the way get a background probe. None when no other member is healthy.
    fn healthy_after(
        members: &[Arc<Member>],
        start: usize,
        except: Option<&Arc<Member>>,
    ) -> Option<usize> {
        let n = members.len();
        (0..n).map(|k| (start + k) % n).find(|&i| {
            let member = &members[i];
            if except.is_some_and(|e| Arc::ptr_eq(e, member)) {
                return false;
            }
            if member.healthy() {
                return true;
            }
            member.probe();
            false
        })
    }

    /// The member of `members` for the next call: among the healthy ones, the least busy when
    /// their carriers say (multiplex: fewest calls held by its least busy stream), round robin
    /// otherwise and between equals; when none is healthy, the next in turn (its own reconnect
    /// then runs inline).
    pub fn pick(&self, members: &[Arc<Member>]) -> usize {
        let n = members.len();
        if n == 1 {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let Some(first) = Self::healthy_after(members, start, None) else {
            return start;
        };
        let Some(mut least) = members[first].carrier.load() else {
            return first;
        };
        let mut best = first;
        for k in 1..n {
            let i = (first + k) % n;
            let member = &members[i];
            if !member.healthy() {
                continue;
            }
            if let Some(load) = member.carrier.load().filter(|&load| load < least) {
                (best, least) = (i, load);
            }
        }
        best
    }

    /// The member for a stream (after looking at the process sockets when it is time).
    pub async fn member(&self) -> Arc<Member> {
        self.refresh(false).await;
        let members = self.members();
        members[self.pick(&members)].clone()
    }

    /// Runs `call` on a picked member; on UNAVAILABLE, once more on another healthy member
    /// (after looking at the process sockets again) within the deadline (`timeout` from now).
    pub async fn call<M: Clone, T>(
        &self,
        message: M,
        timeout: Option<Duration>,
        call: OnMember<M, T>,
    ) -> Result<T, Status> {
        self.refresh(false).await;
        let members = self.members();
        let first = self.pick(&members);
        if members.len() == 1 && self.discovery.is_none() {
            return call(&members[first], message, timeout).await;
        }
        let deadline = deadline_after(timeout);
        let failure = match call(&members[first], message.clone(), timeout).await {
            Err(status) if status.code() == Code::Unavailable => status,
            other => return other,
        };
        self.refresh(true).await;
        let now = self.members();
        let Some(other) = Self::healthy_after(&now, self.pick(&now), Some(&members[first])) else {
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
        call(&now[other], message, left).await
    }

    /// Channels re-established after failures, over every member (past ones included).
    pub fn reconnects(&self) -> u64 {
        self.retired_reconnects.load(Ordering::Relaxed)
            + self
                .members()
                .iter()
                .map(|m| m.connections.reconnects())
                .sum::<u64>()
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
