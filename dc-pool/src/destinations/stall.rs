//! Stalled destinations: a request outstanding far too long, reported once
//! ([`DcPoolEvent::Stalled`]).
//!
//! With `rnr_retry` 7 (retry for ever, the bring-up's default) a SEND (or WRITE with immediate)
//! to a target whose shared receive queue ran dry is NAKed "receiver not ready" again and
//! again: its DCI, or DCI stream, completes nothing, ever, and every request behind it waits
//! (ibv_modify_qp(3): `rnr_retry` 7 "means infinite"; dc-hardware-rules, third review). Nothing
//! fails, so nothing else in the pool sees it.
//!
//! The oldest request not reported of each initiator (of each stream, with DCI streams) is the
//! one the device works on: every request behind it waits for it. [`PoolCore::watch_stalls`],
//! run by every `poll` and `progress` (through `tick`), reads these heads at most every eighth
//! of the stall timeout; a head seen again unchanged since the first scan that saw it, for the
//! stall timeout or longer, is reported with its destination, once. A head is seen no earlier
//! than it was posted, so no request is reported before it was outstanding for the timeout; it
//! is reported at most an eighth of the timeout (and one poll) after that. Once the head
//! completes (or fails), the next one is watched afresh: a later stall is reported again.
//!
//! The time is the pool's clock ([`DcPoolSettings::setup_clock`](crate::settings::DcPoolSettings::setup_clock)):
//! `Instant::now` by default, or one a test moves.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::PoolCore;
use crate::types::DcPoolEvent;

/// The head request of one initiator's stream, as the scans saw it.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// Its request number.
    number: u64,
    /// The first scan that saw it at the head.
    since: Instant,
    reported: bool,
}

/// The heads of the streams holding requests (only those: bounded by the initiators' streams in
/// use), and when to look at them next.
#[derive(Debug)]
pub(super) struct StallWatch {
    /// The settings' stall timeout, read on every `poll`.
    timeout: Option<Duration>,
    next_scan: Option<Instant>,
    /// By (initiator, stream; 0 without streams).
    heads: BTreeMap<(usize, u16), Head>,
}

impl StallWatch {
    /// A watch that reports heads outstanding for `timeout` (`None`: never).
    pub(super) fn new(timeout: Option<Duration>) -> Self {
        Self {
            timeout,
            next_scan: None,
            heads: BTreeMap::new(),
        }
    }
}

impl PoolCore {
    /// Reports, once each, the heads outstanding for the stall timeout or longer (see the
    /// [module](self) documentation).
    pub(super) fn watch_stalls(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        // `None`: stalls are not reported (and the clock is not read for them).
        let Some(timeout) = self.stalls.timeout else {
            return;
        };
        let now = self.settings.now();
        if self.stalls.next_scan.is_some_and(|at| now < at) {
            return;
        }
        match now.checked_add((timeout / 8).max(Duration::from_nanos(1))) {
            Some(at) => self.stalls.next_scan = Some(at),
            // A timeout past the clock's end: nothing is outstanding that long.
            None => {
                self.stalls.heads.clear();
                return;
            },
        }
        let mut heads = BTreeMap::new();
        for (initiator, requests) in self.requests.iter().enumerate() {
            for (stream, number, d) in requests.heads() {
                let mut head = match self.stalls.heads.get(&(initiator, stream)) {
                    Some(seen) if seen.number == number => *seen,
                    _ => Head {
                        number,
                        since: now,
                        reported: false,
                    },
                };
                if !head.reported && now.saturating_duration_since(head.since) >= timeout {
                    head.reported = true;
                    sink(DcPoolEvent::Stalled {
                        destination: self.id(d),
                        initiator,
                        stream: requests.has_streams().then_some(stream),
                    });
                }
                heads.insert((initiator, stream), head);
            }
        }
        self.stalls.heads = heads;
    }
}
