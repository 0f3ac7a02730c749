//! Who holds an initiator and who waits for one (dedicated policies), and who waits out a
//! would-block: a free initiator goes to the destination that asks, or to the first in line with
//! a `Ready` and a grant timer; a held one goes back once its holder has nothing outstanding.
//! A destination's [`Assignment`] is the only record of its hold and of its place in line.
use super::destination::Assignment;
use super::{live, PoolCore, Refusal};
use crate::requests::Health;
use crate::types::{DcPoolWouldBlock, DestinationId};

// `#[inline]` on the holds a dedicated policy's post or completion runs: `PoolCore` is not
// generic, so without it the caller's crate calls them through the PLT (`scripts/bench`:
// send_dc_pool_dedicated_write_settled broke its limit).
impl PoolCore {
    /// A free initiator for dedicated destination `d` to hold; none free: `d` goes in line.
    #[inline]
    pub(super) fn take_free(&mut self, d: u32) -> Result<u16, Refusal> {
        let Some(i) = self.free.pop() else {
            if self.requests.iter().all(|r| r.health() == Health::OutOfService) {
                return Err(Refusal::NoInitiatorInService);
            }
            self.enqueue(d);
            return Err(Refusal::WouldBlock(DcPoolWouldBlock::NoInitiator));
        };
        self.hold(d, i, 0);
        Ok(i)
    }

    /// Destination `d` holds initiator `i` by grant `grant` from the line (0: taken free).
    fn hold(&mut self, d: u32, i: u16, grant: u64) {
        let since = self.requests[i as usize].head();
        let holds = Assignment::Holds {
            initiator: i,
            since,
            grant,
            over_quota: false,
        };
        if let Assignment::InLine { previous, next } = std::mem::replace(&mut self.at(d).assignment, holds) {
            self.close_line(d, previous, next);
        }
    }

    /// Destination `d` gives back initiator `initiator` if it holds it, has nothing outstanding
    /// there, and it needs no recovery (a held initiator carries only its holder's requests).
    #[inline]
    pub(super) fn release_if_idle(&mut self, d: u32, initiator: usize) {
        let holds = self.places[d as usize]
            .destination
            .as_ref()
            .is_some_and(|l| matches!(l.assignment, Assignment::Holds { initiator: i, .. } if i as usize == initiator));
        let requests = &self.requests[initiator];
        if holds && requests.outstanding() == 0 && requests.health() != Health::Error {
            self.release(d);
        }
    }

    /// Destination `d` gives back the initiator it holds.
    #[inline]
    fn release(&mut self, d: u32) {
        if let Some(initiator) = self.unhold(d) {
            self.give_back(initiator);
        }
    }

    /// Initiator `initiator`, held by nobody now, goes to the line or the free ones.
    #[inline]
    pub(super) fn give_back(&mut self, initiator: u16) {
        if self.requests[initiator as usize].health() != Health::OutOfService {
            self.give(initiator);
        }
    }

    /// Destination `d` returns its initiator; refused for its quota, it goes in line.
    #[inline]
    fn unhold(&mut self, d: u32) -> Option<u16> {
        let live = self.at(d);
        let Assignment::Holds {
            initiator, over_quota, ..
        } = live.assignment
        else {
            return None;
        };
        live.assignment = Assignment::None;
        if over_quota && !live.retiring {
            self.enqueue(d);
        }
        Some(initiator)
    }

    /// A freed initiator, healthy: to the first destination in line, or to the free ones.
    #[inline]
    fn give(&mut self, initiator: u16) {
        match self.line_ends {
            None => self.free.push(initiator),
            Some((first, _)) => self.grant(first, initiator),
        }
    }

    /// Destination `first`, the first in line, is granted `initiator`, reported by `Ready`. Out of
    /// line: inlined, it makes the common give back save and restore registers.
    #[inline(never)]
    fn grant(&mut self, first: u32, initiator: u16) {
        self.granted += 1;
        self.hold(first, initiator, self.granted);
        // Its timer starts with its `Ready` (`report_ready`): a grant never expires unannounced.
        self.ready.push_back((self.id(first), self.granted));
    }

    /// Puts destination `d` at the end of the line.
    fn enqueue(&mut self, d: u32) {
        if matches!(self.at(d).assignment, Assignment::InLine { .. }) {
            return;
        }
        let previous = self.line_ends.map(|(_, last)| last);
        self.at(d).assignment = Assignment::InLine { previous, next: None };
        match self.line_ends {
            None => self.line_ends = Some((d, d)),
            Some((first, last)) => {
                self.set_link(last, |_, next| *next = Some(d));
                self.line_ends = Some((first, d));
            },
        }
    }

    fn set_link(&mut self, d: u32, change: impl FnOnce(&mut Option<u32>, &mut Option<u32>)) {
        if let Assignment::InLine { previous, next } = &mut self.at(d).assignment {
            change(previous, next);
        }
    }

    pub(super) fn unlink(&mut self, d: u32) {
        let Some(live) = self.places[d as usize].destination.as_mut() else {
            return;
        };
        let Assignment::InLine { previous, next } = live.assignment else {
            return;
        };
        live.assignment = Assignment::None;
        self.close_line(d, previous, next);
    }

    /// Links `d`'s neighbours in line to each other: `d` left the line.
    fn close_line(&mut self, d: u32, previous: Option<u32>, next: Option<u32>) {
        let (first, last) = self.line_ends.expect("a destination in line: the line has ends");
        match previous {
            Some(p) => self.set_link(p, |_, n| *n = next),
            None => debug_assert_eq!(first, d),
        }
        match next {
            Some(n) => self.set_link(n, |p, _| *p = previous),
            None => debug_assert_eq!(last, d),
        }
        self.line_ends = match (previous, next) {
            (None, None) => None,
            (None, Some(n)) => Some((n, last)),
            (Some(p), None) => Some((first, p)),
            (Some(_), Some(_)) => Some((first, last)),
        };
    }

    pub(crate) fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        let mut at = self.line_ends.map(|(first, _)| first);
        std::iter::from_fn(move || {
            let d = at?;
            at = match self.places[d as usize].destination.as_ref()?.assignment {
                Assignment::InLine { next, .. } => next,
                _ => None,
            };
            Some(self.id(d))
        })
    }

    pub(crate) fn cancel_wait(&mut self, destination: DestinationId) {
        if !self.contains(destination) {
            return;
        }
        let d = destination.index() as u32;
        self.unlink(d);
        if let Assignment::Holds { initiator, .. } = self.at(d).assignment {
            self.release_if_idle(d, initiator as usize);
        }
    }

    /// Takes `initiator`, which holds nothing, out of service: its holder loses it, and destinations
    /// bound to it are bound to the others.
    pub(super) fn take_out_of_service(&mut self, initiator: usize) {
        self.requests[initiator].take_out_of_service();
        self.free.retain(|&i| i as usize != initiator);
        let on_it = |assignment: Assignment| assignment.initiator().is_some_and(|(i, _)| i as usize == initiator);
        let on_it: Vec<u32> = (0..self.places.len() as u32)
            .filter(|&d| {
                self.places[d as usize]
                    .destination
                    .as_ref()
                    .is_some_and(|l| on_it(l.assignment))
            })
            .collect();
        for d in on_it {
            if self.settings.policy().is_dedicated() {
                self.unhold(d);
                // Back in line, it takes a free initiator if there is one.
                if self.line_ends.is_some() {
                    if let Some(free) = self.free.pop() {
                        self.give(free);
                    }
                }
            } else {
                // They have nothing outstanding on it.
                self.bind(d);
            }
        }
        self.unblock(initiator);
    }

    /// Reports `Ready` for the destinations waiting for `initiator` that may post again: it has
    /// room and is not in error (nor their stream), or it is out of service.
    pub(super) fn unblock(&mut self, initiator: usize) {
        let Self {
            requests,
            places,
            unblocked,
            ..
        } = self;
        let requests = &mut requests[initiator];
        if !requests.has_blocked() || requests.health() == Health::Error {
            return;
        }
        let lost = requests.health() == Health::OutOfService;
        let room = lost || requests.room() > 0;
        requests.unblock(
            |requests, id| {
                let stream = live(places, id)?.assignment.initiator().map_or(0, |(_, stream)| stream);
                Some(room && (lost || !requests.lane_errored(stream)))
            },
            |id| unblocked.push_back(id),
        );
    }

    /// Gives back the grants from the line that were not used within the timeout.
    pub(super) fn expire_grants(&mut self) {
        let now = self.settings.now();
        while let Some(&(id, initiator, grant, expires)) = self.grants.front() {
            if expires > now {
                break;
            }
            self.grants.pop_front();
            let requests = &self.requests[initiator as usize];
            let unused = self.live(id).is_some_and(|l| {
                l.assignment
                    == Assignment::Holds {
                        initiator,
                        since: requests.head(),
                        grant,
                        over_quota: false,
                    }
            }) && requests.outstanding() == 0
                && requests.health() != Health::Error;
            if unused {
                self.release(id.index() as u32);
            }
        }
    }
}
