//! A [`ThreadDomain`]: a thread domain (`ibv_alloc_td`) and the parent domain
//! (`ibv_alloc_parent_domain`) that puts one queue pair on it and on its protection domain.
//!
//! On mlx5 it buys the queue pair a BlueFlame register of its own, written without a lock
//! (`create_qp` in `providers/mlx5/verbs.c`, from `mlx5_alloc_td`'s `mlx5_attach_dedicated_uar`;
//! without BlueFlame the context's `nc_uar`), and a send queue without a lock
//! (`mlx5_spinlock_init_pd`), whatever `MLX5_SHUT_UP_BF` says. UCX makes one per worker for the
//! same register (`uct_ib_mlx5_res_domain_init`). No ConnectX has confirmed this here: it is read
//! from rdma-core's and UCX's sources.
//!
//! Only [`DcInitiatorBuilder::build_on_thread_domain`](crate::mlx5::dc::initiator::DcInitiatorBuilder::build_on_thread_domain)
//! makes one; its [`DcInitiatorOnThreadDomain`](crate::mlx5::dc::initiator::thread_domain::DcInitiatorOnThreadDomain)
//! holds it, and destroys the DC initiator first.
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_alloc_parent_domain, ibv_alloc_td, ibv_dealloc_pd, ibv_dealloc_td, ibv_parent_domain_init_attr, ibv_pd, ibv_td,
    ibv_td_init_attr,
};
use sideway::ibverbs::protection_domain::ProtectionDomain;

/// Error returned by [`DcInitiatorBuilder::build_on_thread_domain`](crate::mlx5::dc::initiator::DcInitiatorBuilder::build_on_thread_domain)
/// when it allocates a [`ThreadDomain`].
#[derive(Debug, thiserror::Error)]
#[error("failed to allocate thread domain")]
#[non_exhaustive]
pub struct AllocateThreadDomainError(#[from] pub AllocateThreadDomainErrorKind);

/// The enum type for [`AllocateThreadDomainError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocateThreadDomainErrorKind {
    /// The provider has no thread domains or parent domains (`EOPNOTSUPP`).
    #[error("the provider has no thread domains (EOPNOTSUPP)")]
    NotSupported,
    /// libmlx5 has no register left to give a thread domain (`ENOSPC`, `mlx5_alloc_dyn_uar`;
    /// rdma-core 55 lets one page past its bound through, which the kernel's `uar_mmap` refuses:
    /// [`ThreadDomain`](Self::ThreadDomain), `EINVAL`).
    #[error("no register left for a thread domain (ENOSPC): the kernel has no dynamic UAR allocation")]
    NoRegisterLeft,
    /// `ibv_alloc_td` failed otherwise (`mlx5_alloc_td` without any register leaves `errno`).
    #[error("ibv_alloc_td failed")]
    ThreadDomain(#[source] io::Error),
    /// `ibv_alloc_parent_domain` failed.
    #[error("ibv_alloc_parent_domain failed")]
    ParentDomain(#[source] io::Error),
}

/// A thread domain and the parent domain that puts one queue pair on it (libmlx5 refuses to
/// deallocate either while something holds it: `EBUSY`).
#[derive(Debug)]
pub struct ThreadDomain {
    /// The parent domain, on `td` and `_pd`: deallocated first.
    parent_domain: NonNull<ibv_pd>,
    td: NonNull<ibv_td>,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the handles are only handed to the library, in `Drop` (from whichever thread drops
// it) and by the owner of a queue pair created on it.
unsafe impl Send for ThreadDomain {}
// SAFETY: `&self` gives nothing but copies of the handles.
unsafe impl Sync for ThreadDomain {}

impl Drop for ThreadDomain {
    fn drop(&mut self) {
        // SAFETY: both handles came from their allocations and are deallocated once, the parent
        // domain (which holds the thread domain and the protection domain) first.
        let ret = unsafe { ibv_dealloc_pd(self.parent_domain.as_ptr()) };
        super::check_destroy("ibv_dealloc_pd (parent domain)", ret);
        // SAFETY: as above.
        let ret = unsafe { ibv_dealloc_td(self.td.as_ptr()) };
        super::check_destroy("ibv_dealloc_td", ret);
    }
}

impl ThreadDomain {
    /// Allocates a thread domain on `pd`'s device context and a parent domain of `pd` on it.
    pub(crate) fn new(pd: &Arc<ProtectionDomain>) -> Result<Self, AllocateThreadDomainError> {
        // SAFETY: the PD, and so its context, is alive while `pd` is.
        let context = unsafe { pd.pd().as_ref().context };
        let mut td_attr = ibv_td_init_attr { comp_mask: 0 };
        // SAFETY: an open context and a valid attribute struct.
        let td = NonNull::new(unsafe { ibv_alloc_td(context, &mut td_attr) })
            .ok_or_else(|| thread_domain_error(io::Error::last_os_error()))?;
        // SAFETY: every field is a pointer, an integer or an optional function: zero is a value
        // of each (no allocators, no PD context).
        let mut attr: ibv_parent_domain_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: as above.
        attr.pd = unsafe { pd.pd().as_ptr() };
        attr.td = td.as_ptr();
        // SAFETY: an open context; the attribute names a live PD and thread domain.
        let Some(parent_domain) = NonNull::new(unsafe { ibv_alloc_parent_domain(context, &mut attr) }) else {
            let error = io::Error::last_os_error();
            // SAFETY: the thread domain was just allocated and nothing holds it.
            let ret = unsafe { ibv_dealloc_td(td.as_ptr()) };
            super::check_destroy("ibv_dealloc_td", ret);
            return Err(parent_domain_error(error).into());
        };
        Ok(Self {
            parent_domain,
            td,
            _pd: Arc::clone(pd),
        })
    }

    /// # Safety
    ///
    /// Return the handle of the parent domain, the protection domain its queue pair was created
    /// with. We mark this method unsafe because the lifetime of `ibv_pd` is not associated with
    /// the return value; no other queue pair may be created with it (its queue pair's register
    /// is its own).
    pub unsafe fn pd(&self) -> NonNull<ibv_pd> {
        self.parent_domain
    }
}

/// The kind of `ibv_alloc_td`'s `error`.
fn thread_domain_error(error: io::Error) -> AllocateThreadDomainErrorKind {
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP) => AllocateThreadDomainErrorKind::NotSupported,
        Some(libc::ENOSPC) => AllocateThreadDomainErrorKind::NoRegisterLeft,
        _ => AllocateThreadDomainErrorKind::ThreadDomain(error),
    }
}

/// The kind of `ibv_alloc_parent_domain`'s `error`.
fn parent_domain_error(error: io::Error) -> AllocateThreadDomainErrorKind {
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP) => AllocateThreadDomainErrorKind::NotSupported,
        _ => AllocateThreadDomainErrorKind::ParentDomain(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_provider_call_and_no_register_left_are_typed() {
        let errno = io::Error::from_raw_os_error;
        assert!(matches!(
            thread_domain_error(errno(libc::EOPNOTSUPP)),
            AllocateThreadDomainErrorKind::NotSupported
        ));
        assert!(matches!(
            thread_domain_error(errno(libc::ENOSPC)),
            AllocateThreadDomainErrorKind::NoRegisterLeft
        ));
        assert!(matches!(
            thread_domain_error(errno(libc::ENOMEM)),
            AllocateThreadDomainErrorKind::ThreadDomain(error) if error.raw_os_error() == Some(libc::ENOMEM)
        ));
        assert!(matches!(
            parent_domain_error(errno(libc::EOPNOTSUPP)),
            AllocateThreadDomainErrorKind::NotSupported
        ));
        assert!(matches!(
            parent_domain_error(errno(libc::ENOSPC)),
            AllocateThreadDomainErrorKind::ParentDomain(error) if error.raw_os_error() == Some(libc::ENOSPC)
        ));
    }
}
