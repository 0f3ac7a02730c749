//! A DC initiator created on a thread domain of its own ([`DcInitiatorOnThreadDomain`], made by
//! [`DcInitiatorBuilder::build_on_thread_domain`]): its queue pair gets a register that libmlx5
//! gives no other queue pair, which sideway-ext-dc-direct's writer rings without a lock (the
//! [`thread_domain`](crate::ibverbs::thread_domain) module has the rules).
//!
//! The owner destroys the queue pair before its thread domain, which libmlx5 refuses to
//! deallocate while the queue pair holds it (`EBUSY`).
use std::ops::{Deref, DerefMut};

use super::{CreateDcInitiatorError, DcInitiator, DcInitiatorBuilder};
use crate::ibverbs::thread_domain::{AllocateThreadDomainError, ThreadDomain};

/// Error returned by [`DcInitiatorBuilder::build_on_thread_domain`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create DC initiator on a thread domain")]
#[non_exhaustive]
pub struct CreateDcInitiatorOnThreadDomainError(#[from] pub CreateDcInitiatorOnThreadDomainErrorKind);

/// The enum type for [`CreateDcInitiatorOnThreadDomainError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDcInitiatorOnThreadDomainErrorKind {
    /// Allocating the thread domain failed.
    #[error(transparent)]
    ThreadDomain(#[from] AllocateThreadDomainError),
    /// Creating the DC initiator on it failed (the thread domain was deallocated).
    #[error(transparent)]
    Create(#[from] CreateDcInitiatorError),
}

/// A [`DcInitiator`] and the thread domain it was created on, dropped in that order. It
/// dereferences to the DC initiator.
#[derive(Debug)]
pub struct DcInitiatorOnThreadDomain {
    /// Dropped first: the queue pair, before the thread domain it was created on.
    dci: DcInitiator,
    /// `None` only while dropped (see `Drop`).
    thread_domain: Option<ThreadDomain>,
}

impl DcInitiatorBuilder {
    /// Allocates a thread domain on the builder's protection domain and creates the DC initiator
    /// on its parent domain, as [`build`](Self::build) would otherwise.
    ///
    /// # Errors
    ///
    /// [`CreateDcInitiatorOnThreadDomainErrorKind`].
    pub fn build_on_thread_domain(&self) -> Result<DcInitiatorOnThreadDomain, CreateDcInitiatorOnThreadDomainError> {
        let thread_domain = ThreadDomain::new(&self.pd).map_err(CreateDcInitiatorOnThreadDomainErrorKind::from)?;
        // SAFETY: the parent domain of the builder's protection domain, which the owner below
        // keeps alive until after the DC initiator (or which outlives it if creation fails).
        let dci =
            unsafe { self.build_on(thread_domain.pd()) }.map_err(CreateDcInitiatorOnThreadDomainErrorKind::from)?;
        Ok(DcInitiatorOnThreadDomain {
            dci,
            thread_domain: Some(thread_domain),
        })
    }
}

impl DcInitiatorOnThreadDomain {
    /// The thread domain the DC initiator was created on.
    pub fn thread_domain(&self) -> &ThreadDomain {
        // Some until dropped.
        self.thread_domain.as_ref().expect("held until dropped")
    }

    /// Whether the DC initiator held now is the one created on this thread domain: not when
    /// another was swapped in through [`DerefMut`] (`std::mem::swap`). sideway-ext-dc-direct writes
    /// the register of a DC initiator's thread domain only when this holds.
    pub fn is_on_its_thread_domain(&self) -> bool {
        let Some(thread_domain) = &self.thread_domain else {
            return false;
        };
        // SAFETY: the queue pair is alive; only its PD field is read, and both handles are only
        // compared.
        unsafe { self.dci.qp().as_ref().pd == thread_domain.pd().as_ptr() }
    }
}

impl Drop for DcInitiatorOnThreadDomain {
    fn drop(&mut self) {
        // A DC initiator swapped in from elsewhere is destroyed here, while the one created on
        // this thread domain may live on: the thread domain is then leaked, not deallocated
        // under it (libmlx5 would refuse with `EBUSY`).
        if !self.is_on_its_thread_domain() {
            std::mem::forget(self.thread_domain.take());
        }
        // Then the fields: the DC initiator, and the thread domain.
    }
}

impl Deref for DcInitiatorOnThreadDomain {
    type Target = DcInitiator;

    fn deref(&self) -> &DcInitiator {
        &self.dci
    }
}

impl DerefMut for DcInitiatorOnThreadDomain {
    fn deref_mut(&mut self) -> &mut DcInitiator {
        &mut self.dci
    }
}
