//! This crate's own: a DC initiator builder's settings taken to another protection domain (a DC
//! pool builds its initiators on its own).
use std::sync::Arc;

use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::DcInitiatorBuilder;

impl DcInitiatorBuilder {
    /// The protection domain the initiator is created on (default: the one the builder was
    /// made on).
    pub fn setup_protection_domain(&mut self, pd: &Arc<ProtectionDomain>) -> &mut Self {
        self.pd = Arc::clone(pd);
        self
    }
}
