//! [`DcPoolSettings`]: every setting of a pool apart from its initiators and its send CQ, the
//! same whether the pool's builder creates its initiators or they were made elsewhere
//! ([`DcInitiatorPool::from_initiators`](super::DcInitiatorPool::from_initiators)).
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::types::DcPoolPolicy;
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;

/// The settings of a [`DcInitiatorPool`](super::DcInitiatorPool): its policy, when a destination
/// is unreachable, its grant and stall timeouts and the clock they are read from, and the
/// protection domain its destinations' address handles are created on. `Default` is the
/// builder's defaults.
///
/// ```
/// use std::time::Duration;
///
/// use sideway_ext_dc_pool::settings::DcPoolSettings;
/// use sideway_ext_dc_pool::types::DcPoolPolicy;
///
/// let mut settings = DcPoolSettings::default();
/// settings
///     .setup_policy(DcPoolPolicy::Static)
///     .setup_stall_timeout(Some(Duration::from_secs(2)));
/// assert_eq!(settings.policy(), DcPoolPolicy::Static);
/// assert_eq!(settings.grant_timeout(), Duration::from_millis(10));
/// ```
#[derive(Clone)]
pub struct DcPoolSettings {
    policy: DcPoolPolicy,
    unreachable_after: u32,
    grant_timeout: Duration,
    stall_timeout: Option<Duration>,
    clock: Arc<dyn Fn() -> Instant + Send + Sync>,
    addressing: Option<Addressing>,
}

/// Where a pool creates its destinations' address handles.
#[derive(Clone)]
struct Addressing {
    pd: Arc<ProtectionDomain>,
    port: u8,
    service_class: DcServiceClass,
}

/// The default of [`DcPoolSettings::setup_stall_timeout`].
const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for DcPoolSettings {
    /// The [dedicated](DcPoolPolicy::Dedicated) policy, unreachable after 3 consecutive "retry
    /// exceeded" errors, grants from the line kept 10 ms, stalls reported after 5 s, the time
    /// read from [`Instant::now`], no protection domain.
    fn default() -> Self {
        Self {
            policy: DcPoolPolicy::Dedicated,
            unreachable_after: 3,
            grant_timeout: Duration::from_millis(10),
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
            clock: Arc::new(Instant::now),
            addressing: None,
        }
    }
}

impl std::fmt::Debug for DcPoolSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcPoolSettings")
            .field("policy", &self.policy)
            .field("unreachable_after", &self.unreachable_after)
            .field("grant_timeout", &self.grant_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field("port", &self.addressing.as_ref().map(|a| a.port))
            .finish_non_exhaustive()
    }
}

impl DcPoolSettings {
    /// How initiators are assigned to destinations (default dedicated).
    pub fn setup_policy(&mut self, policy: DcPoolPolicy) -> &mut Self {
        self.policy = policy;
        self
    }

    /// After how many consecutive "transport retry counter exceeded" errors a destination is
    /// reported unreachable (default 3; at least 1).
    pub fn setup_unreachable_after(&mut self, errors: u32) -> &mut Self {
        self.unreachable_after = errors;
        self
    }

    /// How long a destination that was granted an initiator from the line
    /// ([`DcPoolEvent::Ready`](super::types::DcPoolEvent::Ready)) and posted nothing on it keeps
    /// it before it goes to the next in line (default 10 ms; `Duration::MAX`: for ever). It keeps
    /// it as long as it has requests outstanding once it posted. The clock is read by
    /// [`poll`](super::DcInitiatorPool::poll) and [`progress`](super::DcInitiatorPool::progress)
    /// only while such a grant is unused.
    pub fn setup_grant_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.grant_timeout = timeout;
        self
    }

    /// After how long a request that is the oldest outstanding one of its initiator (or DCI
    /// stream) is reported [`Stalled`](super::types::DcPoolEvent::Stalled), once, with its
    /// destination (default 5 s; `None`: never). Checked by [`poll`](super::DcInitiatorPool::poll)
    /// and [`progress`](super::DcInitiatorPool::progress), which read the clock once each while
    /// it is on, and look at the initiators' oldest requests every eighth of the timeout: a
    /// request is reported between the timeout and an eighth more after it was posted. On by
    /// default: with `rnr_retry` 7 (the bring-up's default) a target whose receive queue ran dry
    /// stalls its initiator with no completion, ever; 5 s is past the transport retries to a
    /// target that does not answer (timeout 14, `retry_cnt` 7).
    pub fn setup_stall_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.stall_timeout = timeout;
        self
    }

    /// What the grant and stall timeouts read the time from (default [`Instant::now`]): e.g. a
    /// clock a test moves.
    pub fn setup_clock(&mut self, now: impl Fn() -> Instant + Send + Sync + 'static) -> &mut Self {
        self.clock = Arc::new(now);
        self
    }

    /// The protection domain the pool creates its destinations' address handles on, for `port`
    /// and with `service_class` (the traffic class, flow label and service level; see
    /// [`DcServiceClass`]): [`add_destination`](super::DcInitiatorPool::add_destination) then
    /// names a DC target by its endpoint, and the pool creates its address handle on its first
    /// post (or [`prepare`](super::DcInitiatorPool::prepare)), from the initiators' source GID
    /// ([`PoolInitiator::source_gid_index`](super::PoolInitiator::source_gid_index)), and frees it
    /// with the destination. The builder sets its own protection domain, its bring-up's port
    /// and its service class. Without one (the default), a destination is named with its
    /// address ([`add_destination_with_address`](super::DcInitiatorPool::add_destination_with_address)).
    pub fn setup_protection_domain(
        &mut self, pd: &Arc<ProtectionDomain>, port: u8, service_class: DcServiceClass,
    ) -> &mut Self {
        self.addressing = Some(Addressing {
            pd: Arc::clone(pd),
            port,
            service_class,
        });
        self
    }

    /// The policy.
    pub fn policy(&self) -> DcPoolPolicy {
        self.policy
    }

    /// After how many consecutive "retry exceeded" errors a destination is unreachable.
    pub fn unreachable_after(&self) -> u32 {
        self.unreachable_after
    }

    /// The grant timeout.
    pub fn grant_timeout(&self) -> Duration {
        self.grant_timeout
    }

    /// The stall timeout (`None`: stalls are not reported).
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// The time now, as the pool reads it.
    pub(crate) fn now(&self) -> Instant {
        (self.clock)()
    }

    /// The protection domain, port and service class address handles are created with.
    pub(crate) fn protection_domain(&self) -> Option<(&Arc<ProtectionDomain>, u8, &DcServiceClass)> {
        self.addressing.as_ref().map(|a| (&a.pd, a.port, &a.service_class))
    }
}
