//! The pool's builder: how many initiators, their settings, the policy, the send CQ.
use std::sync::Arc;
use std::time::Duration;

use sideway::ibverbs::completion::{
    CompletionChannel, CompletionQueue, CreateCompletionQueueError, CreateCompletionQueueErrorKind,
    GenericCompletionQueue,
};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::requests::MAX_INITIATORS;
use super::settings::DcPoolSettings;
use super::types::DcPoolPolicy;
use super::{DcInitiatorPool, PoolInitiator};
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
use sideway_ext::mlx5::dc::initiator::{
    BringUpDcInitiatorError, CreateDcInitiatorError, DcInitiatorBringUp, DcInitiatorBuilder, PlanDcInitiatorError,
};

/// Error returned by [`DcInitiatorPoolBuilder::build`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create DC initiator pool")]
#[non_exhaustive]
pub struct CreateDcInitiatorPoolError(#[from] pub CreateDcInitiatorPoolErrorKind);

impl CreateDcInitiatorPoolError {
    /// Whether the device is not mlx5, libmlx5 is missing, or it has no DC (or DCI streams).
    pub fn is_not_supported(&self) -> bool {
        match &self.0 {
            CreateDcInitiatorPoolErrorKind::Plan { source } => source.is_not_supported(),
            CreateDcInitiatorPoolErrorKind::Initiator { source, .. } => source.is_not_supported(),
            _ => false,
        }
    }
}

/// The enum type for [`CreateDcInitiatorPoolError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDcInitiatorPoolErrorKind {
    /// 0, or above 65 536.
    #[error("a pool holds 1 to {max} DC initiators, not {requested}")]
    InvalidInitiatorCount {
        /// What was asked for.
        requested: usize,
        /// The limit.
        max: usize,
    },
    /// Only the streams policy has DCI streams.
    #[error("the {policy:?} policy {requirement}")]
    StreamsMismatch {
        /// The policy.
        policy: DcPoolPolicy,
        /// What it requires.
        requirement: &'static str,
    },
    /// Neither `setup_send_cq` nor `setup_own_send_cq`.
    #[error("a send completion queue is required (setup_send_cq or setup_own_send_cq)")]
    MissingSendCompletionQueue,
    /// Fewer than initiators × the granted send queue.
    #[error("the send completion queue holds {cqe} completions; {needed} requests can be in flight")]
    SendCompletionQueueTooSmall {
        /// What it holds (`ibv_cq.cqe`).
        cqe: u32,
        /// Initiators × granted send queue.
        needed: u64,
    },
    /// E.g. above `max_cqe`.
    #[error("creating the pool's send completion queue of {cqe} entries failed")]
    SendCompletionQueue {
        /// The size asked for (initiators × granted send queue).
        cqe: u64,
        /// Why.
        #[source]
        source: CreateCompletionQueueError,
    },
    /// No `setup_bring_up`.
    #[error("the pool brings its initiators up: setup_bring_up is required")]
    MissingBringUp,
    /// The initiators' settings do not fit the device (checked before anything is created).
    #[error("the DC initiators' settings do not fit the device")]
    Plan {
        /// Why.
        #[source]
        source: PlanDcInitiatorError,
    },
    /// Creation of initiator `index`; the ones before it were destroyed.
    #[error("creating DC initiator {index} failed")]
    Initiator {
        /// Which one.
        index: usize,
        /// Why.
        #[source]
        source: CreateDcInitiatorError,
    },
    /// Bring-up of initiator `index`.
    #[error("bringing DC initiator {index} up failed")]
    BringUp {
        /// Which one.
        index: usize,
        /// Why.
        #[source]
        source: BringUpDcInitiatorError,
    },
}

/// Builds a [`DcInitiatorPool`] ([`DcPoolProtectionDomainExt::create_dci_pool_builder`]).
#[derive(Debug)]
pub struct DcInitiatorPoolBuilder {
    pd: Arc<ProtectionDomain>,
    initiator: DcInitiatorBuilder,
    send_cq: Option<GenericCompletionQueue>,
    count: usize,
    bring_up: Option<DcInitiatorBringUp>,
    service_class: DcServiceClass,
    settings: DcPoolSettings,
    own_send_cq: Option<OwnSendCq>,
}

/// The device, and a completion channel with its vector.
type OwnSendCq = (Arc<DeviceContext>, Option<(Arc<CompletionChannel>, u32)>);

impl DcInitiatorPoolBuilder {
    /// A builder with each setter's default.
    pub fn new(pd: &Arc<ProtectionDomain>) -> Self {
        Self {
            pd: Arc::clone(pd),
            initiator: DcInitiatorBuilder::new(pd),
            send_cq: None,
            count: 8,
            bring_up: None,
            service_class: DcServiceClass::new(),
            settings: DcPoolSettings::default(),
            own_send_cq: None,
        }
    }

    /// The initiators' send CQ (this or [`setup_own_send_cq`](Self::setup_own_send_cq) is
    /// required), maybe shared ([`DcInitiatorPool::complete`]). It must hold initiators × the
    /// granted send queue (libmlx5 rounds `max_send_wr` up), plus what the others need.
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.send_cq = Some(send_cq.into());
        self.own_send_cq = None;
        self
    }

    /// Lets [`build`](Self::build) create the send CQ on `context`, with `channel`'s completion
    /// channel and vector if given (arm it through [`DcInitiatorPool::send_cq`]).
    pub fn setup_own_send_cq(
        &mut self, context: &Arc<DeviceContext>, channel: Option<(&Arc<CompletionChannel>, u32)>,
    ) -> &mut Self {
        self.own_send_cq = Some((
            Arc::clone(context),
            channel.map(|(channel, vector)| (Arc::clone(channel), vector)),
        ));
        self.send_cq = None;
        self
    }

    /// As [`DcPoolSettings::setup_grant_timeout`].
    pub fn setup_grant_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.settings.setup_grant_timeout(timeout);
        self
    }

    /// As [`DcPoolSettings::setup_clock`].
    pub fn setup_clock(&mut self, now: impl Fn() -> std::time::Instant + Send + Sync + 'static) -> &mut Self {
        self.settings.setup_clock(now);
        self
    }

    /// How many DC initiators (default 8).
    pub fn setup_initiators(&mut self, count: usize) -> &mut Self {
        self.count = count;
        self
    }

    /// As [`DcPoolSettings::setup_policy`].
    pub fn setup_policy(&mut self, policy: DcPoolPolicy) -> &mut Self {
        self.settings.setup_policy(policy);
        self
    }

    /// Each initiator's settings (default [`DcInitiatorBuilder::new`]'s), but the PD and send CQ.
    pub fn setup_initiator(&mut self, initiator: &DcInitiatorBuilder) -> &mut Self {
        self.initiator = initiator.clone();
        self
    }

    /// How every initiator is brought up and recovered (required). Its source GID is the address
    /// handles'; its path MTU must be the smallest destination's.
    pub fn setup_bring_up(&mut self, bring_up: DcInitiatorBringUp) -> &mut Self {
        self.bring_up = Some(bring_up);
        self
    }

    /// The address handles' [`DcServiceClass`] (default all 0).
    pub fn setup_service_class(&mut self, class: DcServiceClass) -> &mut Self {
        self.service_class = class;
        self
    }

    /// As [`DcPoolSettings::setup_unreachable_after`].
    pub fn setup_unreachable_after(&mut self, errors: u32) -> &mut Self {
        self.settings.setup_unreachable_after(errors);
        self
    }

    /// As [`DcPoolSettings::setup_stall_timeout`].
    pub fn setup_stall_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.settings.setup_stall_timeout(timeout);
        self
    }

    /// Creates the initiators and brings each up to RTS.
    pub fn build(&self) -> Result<DcInitiatorPool, CreateDcInitiatorPoolError> {
        let policy = self.settings.policy();
        check_shape(self.count, policy, self.initiator.streams().is_some())?;
        let bring_up = self
            .bring_up
            .as_ref()
            .ok_or(CreateDcInitiatorPoolErrorKind::MissingBringUp)?;
        let mut initiator_builder = self.initiator.clone();
        initiator_builder.setup_protection_domain(&self.pd);
        let at_least = self.count as u64 * u64::from(self.initiator.max_send_wr().max(1));
        // The initiators' settings checked against the device before anything is created; the
        // send queue libmlx5 will grant each.
        let plan = || {
            initiator_builder
                .planned_max_send_wr()
                .map_err(|source| CreateDcInitiatorPoolErrorKind::Plan { source })
        };
        let send_cq = match (&self.send_cq, &self.own_send_cq) {
            (Some(cq), _) => {
                let cqe = entries(cq);
                if u64::from(cqe) < at_least {
                    return Err(
                        CreateDcInitiatorPoolErrorKind::SendCompletionQueueTooSmall { cqe, needed: at_least }.into(),
                    );
                }
                plan()?;
                cq.clone()
            },
            (None, Some((context, channel))) => {
                let cqe_of = |needed: u64| {
                    u32::try_from(needed)
                        .ok()
                        .filter(|&cqe| cqe <= i32::MAX as u32)
                        .ok_or_else(|| CreateDcInitiatorPoolErrorKind::SendCompletionQueue {
                            cqe: needed,
                            source: CreateCompletionQueueErrorKind::Ibverbs(std::io::Error::from_raw_os_error(
                                libc::EINVAL,
                            ))
                            .into(),
                        })
                };
                cqe_of(at_least)?;
                let needed = self.count as u64 * u64::from(plan()?.max(1));
                let cqe = cqe_of(needed)?;
                let mut builder = context.create_cq_builder();
                builder.setup_cqe(cqe);
                if let Some((channel, vector)) = channel {
                    builder.setup_comp_channel(channel, *vector);
                }
                builder
                    .build()
                    .map_err(|source| CreateDcInitiatorPoolErrorKind::SendCompletionQueue { cqe: needed, source })?
                    .into()
            },
            (None, None) => return Err(CreateDcInitiatorPoolErrorKind::MissingSendCompletionQueue.into()),
        };
        initiator_builder.setup_send_cq(send_cq.clone());
        let mut initiators = Vec::with_capacity(self.count);
        for index in 0..self.count {
            let mut initiator = initiator_builder
                .build()
                .map_err(|source| CreateDcInitiatorPoolErrorKind::Initiator { index, source })?;
            initiator
                .bring_up(bring_up)
                .map_err(|source| CreateDcInitiatorPoolErrorKind::BringUp { index, source })?;
            initiators.push(initiator);
        }
        let mut settings = self.settings.clone();
        settings.setup_protection_domain(&self.pd, bring_up.port(), self.service_class);
        check_send_cq(&initiators, entries(&send_cq))?;
        DcInitiatorPool::from_initiators(initiators, Some(send_cq), &settings)
    }
}

/// How many completions `cq` holds (`ibv_cq.cqe`).
fn entries(cq: &GenericCompletionQueue) -> u32 {
    // SAFETY: the CQ is alive while `cq` is; only its size is read.
    u32::try_from(unsafe { (*cq.cq().as_ptr()).cqe }).unwrap_or(0)
}

/// Whether a send CQ of `cqe` entries holds every request `initiators` may have in flight.
fn check_send_cq<I: PoolInitiator>(initiators: &[I], cqe: u32) -> Result<(), CreateDcInitiatorPoolErrorKind> {
    let per_initiator = initiators.iter().map(I::max_send_wr).min().unwrap_or(0).max(1);
    let needed = initiators.len() as u64 * u64::from(per_initiator);
    if u64::from(cqe) < needed {
        return Err(CreateDcInitiatorPoolErrorKind::SendCompletionQueueTooSmall { cqe, needed });
    }
    Ok(())
}

/// Refuses 0 or too many initiators, and [`check_streams`].
pub(crate) fn check_shape(
    count: usize, policy: DcPoolPolicy, streams: bool,
) -> Result<(), CreateDcInitiatorPoolErrorKind> {
    if count == 0 || count > MAX_INITIATORS {
        return Err(CreateDcInitiatorPoolErrorKind::InvalidInitiatorCount {
            requested: count,
            max: MAX_INITIATORS,
        });
    }
    check_streams(policy, streams)
}

/// Refuses DCI streams under another policy than the streams one, or none under it.
pub(crate) fn check_streams(policy: DcPoolPolicy, streams: bool) -> Result<(), CreateDcInitiatorPoolErrorKind> {
    let requirement = match (policy == DcPoolPolicy::Streams, streams) {
        (true, false) => "needs DCI streams (setup_dci_streams)",
        (false, true) => "does not use DCI streams (only the streams policy does)",
        _ => return Ok(()),
    };
    Err(CreateDcInitiatorPoolErrorKind::StreamsMismatch { policy, requirement })
}

/// The DC initiator pool's factory on a protection domain.
pub trait DcPoolProtectionDomainExt {
    /// A builder of a [`DcInitiatorPool`] on this protection domain.
    fn create_dci_pool_builder(&self) -> DcInitiatorPoolBuilder;
}

impl DcPoolProtectionDomainExt for Arc<ProtectionDomain> {
    fn create_dci_pool_builder(&self) -> DcInitiatorPoolBuilder {
        DcInitiatorPoolBuilder::new(self)
    }
}
