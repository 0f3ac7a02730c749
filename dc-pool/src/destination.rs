//! One destination's record: whom its requests go to (its endpoint and, once resolved, its
//! address handle, or an address added by hand), which initiator it posts
//! on (or its place in the wait line), and whether its target answers. Each is kept here only.
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::ibv_ah;
use sideway::ibverbs::device_context::Mtu;

use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;

use super::types::DestinationId;

/// What a request names its target by: the address handle, the DCT number and the DC key; and
/// the target's path MTU, when its endpoint said it.
pub(crate) type RawAddress = (NonNull<ibv_ah>, u32, u64, Option<Mtu>);

/// Whom a destination's requests go to.
#[derive(Debug)]
pub(crate) enum Target {
    /// A DC target's endpoint, and once resolved the address handle its requests name.
    Endpoint {
        endpoint: DcEndpoint,
        handle: Option<Handle>,
    },
    /// An address handle kept alive by the caller
    /// ([`add_destination_raw`](super::DcInitiatorPool::add_destination_raw)), with the DCT
    /// number and DC key.
    Raw {
        ah: NonNull<ibv_ah>,
        dct_number: u32,
        dc_key: u64,
    },
}

/// Whose address handle an endpoint's requests name.
#[derive(Debug)]
pub(crate) enum Handle {
    /// The pool's, created from the endpoint and freed with the destination.
    Owned(Arc<AddressHandle>),
    /// The initiators' own (a pool without a protection domain).
    Borrowed(NonNull<ibv_ah>),
}

impl Target {
    /// What a request names, once resolved.
    #[inline]
    pub(crate) fn raw(&self) -> Option<RawAddress> {
        match self {
            Self::Endpoint { endpoint, handle } => {
                let ah = match handle.as_ref()? {
                    // SAFETY: only the pointer is read; the handle lives while the destination does.
                    Handle::Owned(ah) => unsafe { ah.ah() },
                    Handle::Borrowed(ah) => *ah,
                };
                Some((ah, endpoint.dct_number(), endpoint.dc_key(), endpoint.path_mtu()))
            },
            Self::Raw { ah, dct_number, dc_key } => Some((*ah, *dct_number, *dc_key, None)),
        }
    }

    /// Its endpoint, unless it was added by its address alone.
    pub(crate) fn endpoint(&self) -> Option<&DcEndpoint> {
        match self {
            Self::Endpoint { endpoint, .. } => Some(endpoint),
            Self::Raw { .. } => None,
        }
    }

    /// Whether the pool created its address handle.
    pub(crate) fn owns_handle(&self) -> bool {
        matches!(
            self,
            Self::Endpoint {
                handle: Some(Handle::Owned(_)),
                ..
            }
        )
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

/// One live destination.
#[derive(Debug)]
pub(crate) struct Destination {
    pub(crate) target: Target,
    pub(crate) assignment: Assignment,
    pub(crate) reach: Reach,
    /// It posts no more, and is removed once its requests were reported.
    pub(crate) retiring: bool,
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

/// A place for a destination: the one living there, if any, and how many lived there before.
#[derive(Debug)]
pub(crate) struct Place {
    pub(crate) generation: u32,
    pub(crate) destination: Option<Destination>,
}

/// The live destination `id` names in `places`, or `None` for a stale or unknown id.
#[inline]
pub(crate) fn live(places: &[Place], id: DestinationId) -> Option<&Destination> {
    let place = places.get(id.index())?;
    (place.generation == id.generation).then_some(place.destination.as_ref()?)
}
