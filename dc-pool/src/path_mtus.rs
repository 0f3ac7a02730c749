//! [`PathMtus`]: the path MTUs of a request's two ends, and whether the responses of an RDMA
//! READ between them reach the requester.
use sideway::ibverbs::device_context::Mtu;

/// The path MTUs of a request's two ends: the requester's (the queue pair that posts it) and the
/// responder's (the one that answers). A DC initiator and a DC target each have their own (the
/// target its [`DcEndpoint::path_mtu`](sideway_ext::mlx5::dc::endpoint::DcEndpoint::path_mtu));
/// sideway-ext's DC post guard does not check them: the pool holds the READs of its batches to
/// [`read_fits`](Self::read_fits) before they reach the provider
/// ([`ReadResponsesTooLarge`](crate::types::PostBatchErrorKind::ReadResponsesTooLarge)), and a
/// program that reads over DC without the pool checks it itself.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PathMtus {
    // `ibv_mtu` values (1 to 5, in the order of their sizes), one byte each: a DC address that
    // carries them stays the size it was without them, for the requests that copy it.
    requester: u8,
    responder: u8,
}

impl std::fmt::Debug for PathMtus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathMtus")
            .field("requester", &self.requester())
            .field("responder", &self.responder())
            .finish()
    }
}

impl PathMtus {
    /// The requester's path MTU and the responder's.
    #[inline]
    pub fn new(requester: Mtu, responder: Mtu) -> Self {
        Self {
            requester: requester as u32 as u8,
            responder: responder as u32 as u8,
        }
    }

    /// Both, when both are known.
    #[inline]
    pub fn known(requester: Option<Mtu>, responder: Option<Mtu>) -> Option<Self> {
        Some(Self::new(requester?, responder?))
    }

    /// The requester's path MTU.
    pub fn requester(&self) -> Mtu {
        Mtu::from(u32::from(self.requester))
    }

    /// The responder's path MTU.
    pub fn responder(&self) -> Mtu {
        Mtu::from(u32::from(self.responder))
    }

    /// Whether the responses of an RDMA READ of `length` bytes reach the requester: the
    /// responder sends the data in packets of up to its own path MTU, so a READ longer than the
    /// requester's path MTU, from a responder whose path MTU is larger, comes back in packets
    /// the requester's path drops (the READ ends in `IBV_WC_RETRY_EXC_ERR`). A READ of at most
    /// the requester's path MTU is one packet of its own length, and fits.
    ///
    /// ```
    /// use sideway::ibverbs::device_context::Mtu;
    /// use sideway_ext_dc_pool::path_mtus::PathMtus;
    ///
    /// // A 1500-byte Ethernet port (1024) reading from a 9000-byte one (4096).
    /// let mtus = PathMtus::new(Mtu::Mtu1024, Mtu::Mtu4096);
    /// assert!(mtus.read_fits(1024));
    /// assert!(!mtus.read_fits(1025));
    /// // The other way round, every READ fits.
    /// assert!(PathMtus::new(Mtu::Mtu4096, Mtu::Mtu1024).read_fits(1 << 20));
    /// ```
    #[inline]
    pub fn read_fits(&self, length: u64) -> bool {
        self.responder <= self.requester || length <= 128 << self.requester
    }
}

/// The payload bytes of a packet at `mtu` (256 to 4096).
pub(crate) fn mtu_bytes(mtu: Mtu) -> u32 {
    256 << (mtu as u32 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Mtu; 5] = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];

    /// The rule itself is held to the device's in tests/device_pool.rs
    /// (`the_read_rule_is_the_devices_for_every_pair_of_path_mtus`).
    #[test]
    fn the_bytes_of_each_mtu_and_the_pair_kept() {
        assert_eq!(mtu_bytes(Mtu::Mtu256), 256);
        assert_eq!(mtu_bytes(Mtu::Mtu4096), 4096);
        for (requester, responder) in ALL.iter().zip(ALL.iter().rev()) {
            let mtus = PathMtus::new(*requester, *responder);
            assert_eq!((mtus.requester(), mtus.responder()), (*requester, *responder));
        }
    }

    #[test]
    fn unknown_on_either_side_is_no_pair() {
        assert_eq!(PathMtus::known(Some(Mtu::Mtu1024), None), None);
        assert_eq!(PathMtus::known(None, Some(Mtu::Mtu4096)), None);
        let both = PathMtus::known(Some(Mtu::Mtu1024), Some(Mtu::Mtu4096)).expect("both known");
        assert_eq!((both.requester(), both.responder()), (Mtu::Mtu1024, Mtu::Mtu4096));
    }
}
