//! The byte order of the self-test's atomics: which one the device used, read from what a
//! fetch-and-add returned and left.

/// The byte order a ConnectX gives an 8-byte atomic's operands and reply: the host's where
/// mlx5_core set `atomic_req_8B_endianness_mode` to host endianness, big-endian (the wire's)
/// otherwise. UCX handles both (`ib_mlx5dv_md.c`); the self-test accepts both and says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOrder {
    Host,
    BigEndian,
}

impl AtomicOrder {
    /// The value of 8 bytes of memory, as the device reads them in this order.
    pub fn read(self, bytes: [u8; 8]) -> u64 {
        match self {
            Self::Host => u64::from_ne_bytes(bytes),
            Self::BigEndian => u64::from_be_bytes(bytes),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Host => "host byte order",
            Self::BigEndian => "big-endian byte order (atomic_req_8B_endianness_mode not host)",
        }
    }

    /// The order in which a fetch-and-add of `add` on memory that held `before` returned
    /// `returned` and left `left`, if one explains all three (the host's first: on a big-endian
    /// host both do).
    pub fn of_fetch_add(before: [u8; 8], add: u64, returned: [u8; 8], left: [u8; 8]) -> Option<Self> {
        [Self::Host, Self::BigEndian].into_iter().find(|order| {
            order.read(returned) == order.read(before) && order.read(left) == order.read(before).wrapping_add(add)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::AtomicOrder;

    #[test]
    fn a_fetch_add_in_either_byte_order_is_recognised() {
        let before = 40u64.to_ne_bytes();
        // Host order: the reply is 40, the memory 42, both in the host's bytes.
        assert_eq!(
            AtomicOrder::of_fetch_add(before, 2, before, 42u64.to_ne_bytes()),
            Some(AtomicOrder::Host)
        );
        // Big-endian: the device reads the memory's bytes as a big-endian number and writes
        // the sum and the reply back in that order.
        let as_be = u64::from_be_bytes(before);
        let returned = as_be.to_be_bytes();
        let left = (as_be + 2).to_be_bytes();
        let seen = AtomicOrder::of_fetch_add(before, 2, returned, left);
        if cfg!(target_endian = "little") {
            assert_eq!(seen, Some(AtomicOrder::BigEndian));
        } else {
            assert_eq!(seen, Some(AtomicOrder::Host));
        }
        // Anything else is neither.
        assert_eq!(AtomicOrder::of_fetch_add(before, 2, before, before), None);
    }
}
