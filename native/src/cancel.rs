//! When a call must stop early: its deadline, and a flag the caller sets when nobody waits for the
//! result any more (the client went away, or the server gave up on the call).
//!
//! Long loops in the core (a batch of texts, the chunks of one long text, a decode step's ids,
//! detokenization, block hashing) call [`Cancel::check`] between units of bounded work, so a call
//! whose client has gone stops within one unit instead of running to the end. The flag is owned by
//! the caller (the server creates one per call it hands to a worker thread) and is only read here.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// A call's deadline and cancellation flag; `Cancel::default()` never stops anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cancel<'a> {
    deadline: Option<Instant>,
    flag: Option<&'a AtomicU32>,
}

impl<'a> Cancel<'a> {
    /// Stops once `deadline` has passed or `flag` is non-zero.
    pub fn new(deadline: Option<Instant>, flag: Option<&'a AtomicU32>) -> Self {
        Cancel { deadline, flag }
    }

    /// Stops `timeout_us` microseconds from now (0 = no deadline) or when `flag` is set.
    pub fn after_micros(timeout_us: u64, flag: Option<&'a AtomicU32>) -> Self {
        let deadline = (timeout_us > 0).then(|| Instant::now() + Duration::from_micros(timeout_us));
        Cancel { deadline, flag }
    }

    /// A token that only has a deadline.
    pub fn with_deadline(deadline: Option<Instant>) -> Self {
        Cancel {
            deadline,
            flag: None,
        }
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the caller has withdrawn the call.
    pub fn is_cancelled(&self) -> bool {
        self.flag.is_some_and(|f| f.load(Ordering::Relaxed) != 0)
    }

    /// `Err` when the call should stop: [`ErrorKind::Cancelled`] when the caller withdrew it,
    /// [`ErrorKind::DeadlineExceeded`] when its deadline passed.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::new(
                ErrorKind::Cancelled,
                "the call was cancelled (its client went away or its deadline passed)",
            ));
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => {
                Err(Error::deadline_exceeded("the request's deadline passed"))
            }
            _ => Ok(()),
        }
    }
}

/// Calls `check` on every `every`-th step of a loop, so a tight loop pays for a clock read only
/// now and then.
#[derive(Debug)]
pub struct Every {
    every: usize,
    count: usize,
}

impl Every {
    /// Checks on the first step and then every `every` steps (at least 1).
    pub fn new(every: usize) -> Self {
        Every {
            every: every.max(1),
            count: 0,
        }
    }

    /// One step: checks `cancel` when the period is up.
    pub fn tick(&mut self, cancel: &Cancel<'_>) -> Result<()> {
        let due = self.count == 0;
        self.count += 1;
        if self.count == self.every {
            self.count = 0;
        }
        if due {
            cancel.check()
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_flag_cancels_and_a_clear_one_does_not() {
        let flag = AtomicU32::new(0);
        let cancel = Cancel::new(None, Some(&flag));
        assert!(cancel.check().is_ok());
        flag.store(1, Ordering::Relaxed);
        let err = cancel.check().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled);
    }

    #[test]
    fn a_passed_deadline_is_deadline_exceeded() {
        let past = Instant::now() - Duration::from_millis(1);
        let err = Cancel::with_deadline(Some(past)).check().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
        assert!(Cancel::default().check().is_ok());
    }

    #[test]
    fn every_checks_on_the_first_step_and_then_periodically() {
        let flag = AtomicU32::new(1);
        let cancel = Cancel::new(None, Some(&flag));
        let mut every = Every::new(3);
        let failed: Vec<bool> = (0..7).map(|_| every.tick(&cancel).is_err()).collect();
        assert_eq!(failed, [true, false, false, true, false, false, true]);
    }
}
