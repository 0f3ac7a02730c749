//! Stalled destinations: a request outstanding far too long, reported once
//! ([`DcPoolEvent::Stalled`]).
//!
//! With `rnr_retry` 7 (the bring-up's default; ibv_modify_qp(3): "means infinite") a SEND to a
//! target whose receive queue ran dry is NAKed "receiver not ready" for ever: its DCI (or
//! stream) completes nothing, and nothing fails. The oldest request not reported of each stream
//! is the one the device works on; every `poll` reads these heads at most every eighth of the
//! stall timeout, and reports a head seen unchanged for the timeout, once. A head is seen no
//! earlier than it was posted, so it is reported no earlier than the timeout and at most an
//! eighth of it (and one poll) later.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::PoolCore;
use crate::types::DcPoolEvent;

/// The head request of one initiator's stream, as the scans saw it.
#[derive(Debug, Clone, Copy)]
struct Head {
    number: u64,
    /// The first scan that saw it at the head.
    since: Instant,
    reported: bool,
}

/// The heads of the streams holding requests, and when to look at them next.
#[derive(Debug)]
pub(super) struct StallWatch {
    next_scan: Option<Instant>,
    /// By (initiator, stream; 0 without streams).
    heads: BTreeMap<(usize, u16), Head>,
}

impl StallWatch {
    /// A watch with nothing seen yet.
    pub(super) fn new() -> Self {
        Self {
            next_scan: None,
            heads: BTreeMap::new(),
        }
    }
}

impl PoolCore {
    /// Reports, once each, the heads outstanding for the stall timeout or longer.
    pub(super) fn watch_stalls(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        // `None`: stalls are not reported (and the clock is not read for them).
        let Some(timeout) = self.settings.stall_timeout() else {
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
