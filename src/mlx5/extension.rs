//! Extension traits that stand in for inherent methods on sideway's types, for the DC queue
//! pairs. Upstream in sideway, each would be an inherent method of the type it extends.
use std::sync::Arc;

use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::dc::initiator::DcInitiatorBuilder;
use super::dc::target::DcTargetBuilder;

/// DC factories on a protection domain.
pub trait DcProtectionDomainExt {
    /// A builder for a [`DcInitiator`](super::dc::initiator::DcInitiator) on this protection
    /// domain.
    fn create_dci_builder(&self) -> DcInitiatorBuilder;

    /// A builder for a [`DcTarget`](super::dc::target::DcTarget) on this protection domain.
    fn create_dct_builder(&self) -> DcTargetBuilder;
}

impl DcProtectionDomainExt for Arc<ProtectionDomain> {
    fn create_dci_builder(&self) -> DcInitiatorBuilder {
        DcInitiatorBuilder::new(self)
    }

    fn create_dct_builder(&self) -> DcTargetBuilder {
        DcTargetBuilder::new(self)
    }
}
