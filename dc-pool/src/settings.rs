//! [`DcPoolSettings`]: every setting of a pool apart from its initiators and its send CQ.
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::types::DcPoolPolicy;
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;

/// The settings of a [`DcInitiatorPool`](super::DcInitiatorPool).
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

#[derive(Clone)]
struct Addressing {
    pd: Arc<ProtectionDomain>,
    port: u8,
    service_class: DcServiceClass,
}

impl Default for DcPoolSettings {
    /// The default of each setter.
    fn default() -> Self {
        Self {
            policy: DcPoolPolicy::Dedicated,
            unreachable_after: 3,
            grant_timeout: Duration::from_millis(10),
            stall_timeout: Some(Duration::from_secs(5)),
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

    /// After how many consecutive "retry exceeded" errors a destination is unreachable (default 3, at least 1).
    pub fn setup_unreachable_after(&mut self, errors: u32) -> &mut Self {
        self.unreachable_after = errors;
        self
    }

    /// How long a destination granted an initiator from the line keeps it without posting
    /// (default 10 ms; `Duration::MAX`: for ever).
    pub fn setup_grant_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.grant_timeout = timeout;
        self
    }

    /// After how long the oldest outstanding request of an initiator (or DCI stream) is
    /// reported [`Stalled`](super::types::DcPoolEvent::Stalled) (default 5 s: past the transport
    /// retries of timeout 14, `retry_cnt` 7; `None`: never), within an eighth more.
    pub fn setup_stall_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.stall_timeout = timeout;
        self
    }

    /// What the timeouts read the time from (default [`Instant::now`]).
    pub fn setup_clock(&mut self, now: impl Fn() -> Instant + Send + Sync + 'static) -> &mut Self {
        self.clock = Arc::new(now);
        self
    }

    /// Of the address handles [`add_destination`](super::DcInitiatorPool::add_destination) makes
    /// (default none: [`add_destination_with_address`](super::DcInitiatorPool::add_destination_with_address)).
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

    /// The unreachable-after count.
    pub fn unreachable_after(&self) -> u32 {
        self.unreachable_after
    }

    /// The grant timeout.
    pub fn grant_timeout(&self) -> Duration {
        self.grant_timeout
    }

    /// The stall timeout.
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    pub(crate) fn now(&self) -> Instant {
        (self.clock)()
    }

    pub(crate) fn protection_domain(&self) -> Option<(&Arc<ProtectionDomain>, u8, &DcServiceClass)> {
        self.addressing.as_ref().map(|a| (&a.pd, a.port, &a.service_class))
    }
}
