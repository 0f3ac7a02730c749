//! A completion the fabric keeps with every byte initialised, padding included: made zero, set
//! field by field, and handed to `ibv_poll_cq`'s array byte for byte, so that a program reading
//! it (or valgrind) never meets undefined bytes.
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};

use rdma_mummy_sys::ibv_wc;

/// An `ibv_wc` that starts with every byte zero.
pub(crate) struct Zeroed(MaybeUninit<ibv_wc>);

impl Zeroed {
    /// Every byte zero.
    pub(crate) fn new() -> Self {
        Self(MaybeUninit::zeroed())
    }
}

impl Deref for Zeroed {
    type Target = ibv_wc;

    fn deref(&self) -> &ibv_wc {
        // SAFETY: all-zero bytes are a valid ibv_wc (integers and a union of integers), and
        // fields are only ever written through DerefMut.
        unsafe { self.0.assume_init_ref() }
    }
}

impl DerefMut for Zeroed {
    fn deref_mut(&mut self) -> &mut ibv_wc {
        // SAFETY: as for Deref.
        unsafe { self.0.assume_init_mut() }
    }
}
