//! One destination's record ([`Destination`], kept in its [`Place`]): whom its requests go to
//! (its endpoint, once resolved, or a DC target added with its address), which initiator it
//! posts on (or its place in the wait line), and whether its target answers.
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;

use super::{Destination, Place};
use crate::types::DestinationId;

/// Whom a destination's requests go to. Its address, once made, is the pool's, kept by place
/// beside the bookkeeping (the initiators' [`Address`](crate::PoolInitiator::Address)).
#[derive(Debug)]
pub(crate) enum Target {
    /// A DC target's endpoint, and whether its address was made (from an address handle the
    /// pool created).
    Endpoint { endpoint: DcEndpoint, resolved: bool },
    /// A DC target added with its address
    /// ([`add_destination_with_address`](crate::DcInitiatorPool::add_destination_with_address)).
    Addressed { dct_number: u32, dc_key: u64 },
}

impl Target {
    /// The DCT number and DC key its requests name, once its address is made.
    #[inline]
    pub(crate) fn address(&self) -> Option<(u32, u64)> {
        match self {
            Self::Endpoint { endpoint, resolved } => resolved.then(|| (endpoint.dct_number(), endpoint.dc_key())),
            Self::Addressed { dct_number, dc_key } => Some((*dct_number, *dc_key)),
        }
    }

    /// Its endpoint, unless it was added with its address.
    pub(crate) fn endpoint(&self) -> Option<&DcEndpoint> {
        match self {
            Self::Endpoint { endpoint, .. } => Some(endpoint),
            Self::Addressed { .. } => None,
        }
    }

    /// Whether the pool made its address (from an address handle it created).
    pub(crate) fn owns_handle(&self) -> bool {
        matches!(self, Self::Endpoint { resolved: true, .. })
    }
}

/// Which initiator a destination posts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Assignment {
    /// None: a dedicated policy's destination that holds none, or a static one while no
    /// initiator is in service.
    None,
    /// It waits in line for an initiator (dedicated policies), after `previous` and before
    /// `next`: the line is these links.
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
    /// It is bound to `initiator`'s `stream` (static and streams policies; stream 0 without
    /// streams).
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
    /// It answers, or failed `retries_exceeded` times in a row with an error that says no target
    /// is there.
    Answering { retries_exceeded: u32 },
    /// Reported unreachable: it posts nothing until revived.
    Unreachable,
}

impl Destination {
    pub(crate) fn new(target: Target) -> Self {
        Self {
            target,
            assignment: Assignment::None,
            reach: Reach::Answering { retries_exceeded: 0 },
            retiring: false,
        }
    }

    /// Its target answered (a request of it completed, or failed for another reason).
    #[inline]
    pub(crate) fn answered(&mut self) {
        if let Reach::Answering { retries_exceeded } = &mut self.reach {
            *retries_exceeded = 0;
        }
    }

    /// Its target did not answer; true when this makes it unreachable after `unreachable_after`
    /// in a row.
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

/// The live destination `id` names in `places`, or `None` for a stale or unknown id.
#[inline]
pub(crate) fn live(places: &[Place], id: DestinationId) -> Option<&Destination> {
    let place = places.get(id.index())?;
    (place.generation == id.generation()).then_some(place.destination.as_ref()?)
}
