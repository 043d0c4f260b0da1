//! Events applied per second over a recent window, as the Python index computes it from a deque
//! of the last 4096 event times (here: runs of events that share one time).

use std::collections::VecDeque;

const REMEMBERED_EVENTS: usize = 4096;

/// The last `REMEMBERED_EVENTS` event times, as (time, events) runs in time order.
#[derive(Clone, Default)]
pub(crate) struct EventRate {
    runs: VecDeque<(f64, usize)>,
    total: usize,
}

impl EventRate {
    /// Records `n` events applied at `now` (seconds).
    pub fn record(&mut self, now: f64, n: usize) {
        if n == 0 {
            return;
        }
        self.runs.push_back((now, n));
        self.total += n;
        while self.total > REMEMBERED_EVENTS {
            let excess = self.total - REMEMBERED_EVENTS;
            let front = self.runs.front_mut().expect("total > 0 means a run");
            if front.1 <= excess {
                self.total -= front.1;
                self.runs.pop_front();
            } else {
                front.1 -= excess;
                self.total -= excess;
            }
        }
    }

    /// Events per second over the events at most `window_s` old; 0 with fewer than two.
    pub fn per_second(&self, now: f64, window_s: f64) -> f64 {
        let mut count = 0usize;
        let mut first = now;
        for &(t, n) in self.runs.iter().rev() {
            if now - t > window_s {
                break;
            }
            count += n;
            first = t;
        }
        if count < 2 {
            return 0.0;
        }
        count as f64 / (now - first).max(1e-9)
    }
}
