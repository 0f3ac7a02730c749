//! C structs handed to libibverbs and its providers with every byte initialised, padding included.
//!
//! A library may read a struct's padding (libibverbs' `ibv_cmd_create_srq` copies an
//! `ibv_srq_init_attr` into an `ibv_srq_init_attr_ex`, whose `comp_mask` gets its tail padding),
//! which a Rust literal or typed copy leaves undefined: a [`Zeroed`] starts all zero in
//! `MaybeUninit` storage, copied byte for byte, and changes field by field, never whole.
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};

use rdma_mummy_sys::{ibv_grh, ibv_qp_attr, ibv_qp_init_attr_ex, ibv_recv_wr, ibv_srq_attr, ibv_srq_init_attr, ibv_wc};

/// Plain C data: integers, raw pointers, and structs, unions and arrays of these.
///
/// # Safety
///
/// All-zero bytes must be a valid value of the type, and it must have no drop glue.
pub(crate) unsafe trait PlainData {}

// SAFETY: bindgen structs of integers, raw pointers and unions of these; zero is valid for each.
unsafe impl PlainData for ibv_srq_init_attr {}
// SAFETY: as above.
unsafe impl PlainData for ibv_srq_attr {}
// SAFETY: as above.
unsafe impl PlainData for ibv_recv_wr {}
// SAFETY: as above.
unsafe impl PlainData for ibv_qp_attr {}
// SAFETY: as above.
unsafe impl PlainData for ibv_qp_init_attr_ex {}
// SAFETY: as above.
unsafe impl PlainData for ibv_wc {}
// SAFETY: as above.
unsafe impl PlainData for ibv_grh {}

/// A C struct that starts with every byte zero and is changed field by field; see the module.
/// Transparent: an array of them is an array of `T`, as the library reads it.
#[repr(transparent)]
pub(crate) struct Zeroed<T: PlainData>(MaybeUninit<T>);

impl<T: PlainData> Zeroed<T> {
    /// Every byte zero.
    pub(crate) const fn new() -> Self {
        Self(MaybeUninit::zeroed())
    }

    /// The struct, for a library call that reads or writes it.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.0.as_mut_ptr()
    }
}

impl<T: PlainData> Default for Zeroed<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: PlainData> Clone for Zeroed<T> {
    /// A copy of every byte, padding included.
    fn clone(&self) -> Self {
        let mut copy = MaybeUninit::<T>::uninit();
        // SAFETY: an untyped copy of one T between two distinct values of this function.
        unsafe { std::ptr::copy_nonoverlapping(self.0.as_ptr(), copy.as_mut_ptr(), 1) };
        Self(copy)
    }
}

// A copy of a `MaybeUninit` is a copy of every byte.
impl<T: PlainData + Copy> Copy for Zeroed<T> {}

impl<T: PlainData> Deref for Zeroed<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: made all zero, which is a valid T (PlainData), and changed only through &mut T.
        unsafe { self.0.assume_init_ref() }
    }
}

impl<T: PlainData> DerefMut for Zeroed<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for deref.
        unsafe { self.0.assume_init_mut() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: PlainData>(value: &Zeroed<T>) -> &[u8] {
        // SAFETY: every byte of a Zeroed is initialised (it starts zeroed and copies are bytewise).
        unsafe { std::slice::from_raw_parts(value.0.as_ptr().cast::<u8>(), std::mem::size_of::<T>()) }
    }

    #[test]
    fn padding_stays_zero_through_field_writes_and_copies() {
        let mut init = Zeroed::<ibv_srq_init_attr>::new();
        init.attr.max_wr = u32::MAX;
        init.attr.max_sge = u32::MAX;
        init.attr.srq_limit = u32::MAX;
        let copy = init;
        // A pointer (8 bytes) and three u32 (12): the last 4 bytes are padding, still zero.
        assert_eq!(std::mem::size_of::<ibv_srq_init_attr>(), 24);
        assert_eq!(&bytes(&copy)[8..20], [0xff; 12]);
        assert_eq!(&bytes(&copy)[20..], [0; 4]);
    }

    #[test]
    fn a_clone_copies_every_byte() {
        let mut attr = Zeroed::<ibv_qp_attr>::new();
        attr.qp_state = 3;
        attr.ah_attr.grh.traffic_class = 0xb8;
        let clone = attr.clone();
        assert_eq!(bytes(&clone), bytes(&attr));
        assert_eq!(bytes(&clone).iter().filter(|&&b| b != 0).count(), 2);
    }
}
