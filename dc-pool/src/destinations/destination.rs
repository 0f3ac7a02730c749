//! One destination's record ([`Destination`]): which initiator it posts on (or its place in the
//! wait line), and whether its target answers.
use super::Destination;

/// Which initiator a destination posts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Assignment {
    /// None: a dedicated policy's destination that holds none, or a static one while no
    /// initiator is in service.
    None,
    /// It waits in line for an initiator (dedicated policies), linked to `previous` and `next`.
    InLine { previous: Option<u32>, next: Option<u32> },
    /// It holds `initiator` (dedicated policies): granted when the initiator's next request was
    /// number `since`, by grant `grant` from the line (0: taken free). `over_quota`: refused for
    /// its quota, it goes in line when it gives the initiator back.
    Holds {
        initiator: u16,
        since: u64,
        grant: u64,
        over_quota: bool,
    },
    /// It is bound to `initiator`'s `stream` (static and streams policies; 0 without streams).
    Bound { initiator: u16, stream: u16 },
}

impl Assignment {
    /// The initiator it posts on, and its stream there.
    #[inline]
    pub(crate) fn initiator(self) -> Option<(u16, u16)> {
        match self {
            Self::Holds { initiator, .. } => Some((initiator, 0)),
            Self::Bound { initiator, stream } => Some((initiator, stream)),
            Self::None | Self::InLine { .. } => None,
        }
    }
}

/// Whether a destination's target answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// It answers, or failed `retries_exceeded` times in a row with a no-target error.
    Answering { retries_exceeded: u32 },
    /// Reported unreachable: it posts nothing until revived.
    Unreachable,
}

impl Destination {
    /// Its target answered (a request of it completed, or failed for another reason).
    #[inline]
    pub(crate) fn answered(&mut self) {
        if let Reach::Answering { retries_exceeded } = &mut self.reach {
            *retries_exceeded = 0;
        }
    }

    /// Its target did not answer; true when this makes it unreachable.
    pub(crate) fn not_answered(&mut self, unreachable_after: u32) -> bool {
        let Reach::Answering { retries_exceeded } = &mut self.reach else {
            return false;
        };
        *retries_exceeded += 1;
        if *retries_exceeded < unreachable_after {
            return false;
        }
        self.reach = Reach::Unreachable;
        true
    }

    pub(crate) fn is_unreachable(&self) -> bool {
        self.reach == Reach::Unreachable
    }
}
