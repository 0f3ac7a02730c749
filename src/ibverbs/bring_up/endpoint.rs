//! [`RcEndpoint`], what an RC queue pair tells its peer to connect to it, with the 24-bit limits
//! its fields are checked against and its serde form.
use std::net::Ipv6Addr;

use sideway::ibverbs::address::Gid;

/// The largest queue pair number: 24 bits.
pub const MAX_QP_NUMBER: u32 = 0xff_ffff;

/// The largest packet sequence number (PSN): 24 bits.
pub const MAX_PSN: u32 = 0xff_ffff;
/// Error returned by [`RcEndpoint::new`] (and by deserialization, as a serde error).
#[derive(Debug, thiserror::Error)]
#[error("invalid RC endpoint")]
#[non_exhaustive]
pub struct InvalidRcEndpointError(#[from] pub InvalidRcEndpointErrorKind);

/// The enum type for [`InvalidRcEndpointError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRcEndpointErrorKind {
    /// The queue pair number does not fit in 24 bits.
    #[error("queue pair number {qp_number:#x} does not fit in 24 bits (at most {MAX_QP_NUMBER:#x})")]
    QueuePairNumberOutOfRange {
        /// The number given.
        qp_number: u32,
    },
    /// The PSN does not fit in 24 bits.
    #[error("PSN {psn:#x} does not fit in 24 bits (at most {MAX_PSN:#x})")]
    PacketSequenceNumberOutOfRange {
        /// The PSN given.
        psn: u32,
    },
}

/// What an RC queue pair needs to connect to its peer: the LID and GID of the peer's port, the
/// peer's queue pair number and the PSN its send queue starts at.
///
/// A value type: made by [`SharedReceiveQueuePair::endpoint`] on the peer (or [`new`](Self::new)
/// from what it sent), handed to [`bring_up`] here.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, as `DcEndpoint` of the `mlx5`
/// feature: the GID as its IPv6 text in human-readable formats, 16 octets in binary ones, the
/// other fields as numbers. Deserializing validates like [`new`](Self::new).
///
/// [`SharedReceiveQueuePair::endpoint`]: crate::ibverbs::queue_pair::SharedReceiveQueuePair::endpoint
/// [`bring_up`]: crate::ibverbs::queue_pair::SharedReceiveQueuePair::bring_up
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RcEndpoint {
    lid: u16,
    #[cfg_attr(feature = "serde", serde(with = "crate::ibverbs::gid_as_ipv6"))]
    gid: Gid,
    qp_number: u32,
    psn: u32,
}

impl std::fmt::Debug for RcEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcEndpoint")
            .field("lid", &self.lid)
            .field("gid", &Ipv6Addr::from(self.gid))
            .field("qp_number", &format_args!("{:#x}", self.qp_number))
            .field("psn", &format_args!("{:#x}", self.psn))
            .finish()
    }
}

impl RcEndpoint {
    /// An endpoint from the peer's values: `lid` and `gid` of its port (on RoCE the LID is 0;
    /// without global routing, on InfiniBand, the GID is unused), its `qp_number` and the `psn`
    /// its send queue starts at.
    ///
    /// # Errors
    ///
    /// - [`QueuePairNumberOutOfRange`](InvalidRcEndpointErrorKind::QueuePairNumberOutOfRange),
    ///   [`PacketSequenceNumberOutOfRange`](InvalidRcEndpointErrorKind::PacketSequenceNumberOutOfRange):
    ///   above [`MAX_QP_NUMBER`], [`MAX_PSN`].
    pub fn new(lid: u16, gid: Gid, qp_number: u32, psn: u32) -> Result<Self, InvalidRcEndpointError> {
        if qp_number > MAX_QP_NUMBER {
            return Err(InvalidRcEndpointErrorKind::QueuePairNumberOutOfRange { qp_number }.into());
        }
        if psn > MAX_PSN {
            return Err(InvalidRcEndpointErrorKind::PacketSequenceNumberOutOfRange { psn }.into());
        }
        Ok(Self {
            lid,
            gid,
            qp_number,
            psn,
        })
    }

    /// The LID of the peer's port (InfiniBand; 0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The GID of the peer's port: the destination of a global address vector.
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The peer's queue pair number (24 bits): `dest_qp_num` at RTR.
    pub fn qp_number(&self) -> u32 {
        self.qp_number
    }

    /// The PSN the peer's send queue starts at (24 bits): `rq_psn` at RTR.
    pub fn psn(&self) -> u32 {
        self.psn
    }
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for RcEndpoint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The serialized fields, not yet validated.
        #[derive(serde::Deserialize)]
        #[serde(rename = "RcEndpoint", deny_unknown_fields)]
        struct Unchecked {
            lid: u16,
            #[serde(with = "crate::ibverbs::gid_as_ipv6")]
            gid: Gid,
            qp_number: u32,
            psn: u32,
        }
        let raw = Unchecked::deserialize(deserializer)?;
        RcEndpoint::new(raw.lid, raw.gid, raw.qp_number, raw.psn).map_err(|err| serde::de::Error::custom(err.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::roce_gid;

    #[test]
    fn endpoint_fields_are_checked_to_24_bits() {
        assert!(RcEndpoint::new(0, roce_gid(), MAX_QP_NUMBER, MAX_PSN).is_ok());
        assert!(matches!(
            RcEndpoint::new(0, roce_gid(), MAX_QP_NUMBER + 1, 0).unwrap_err().0,
            InvalidRcEndpointErrorKind::QueuePairNumberOutOfRange { qp_number: 0x100_0000 }
        ));
        assert!(matches!(
            RcEndpoint::new(0, roce_gid(), 1, u32::MAX).unwrap_err().0,
            InvalidRcEndpointErrorKind::PacketSequenceNumberOutOfRange { psn: u32::MAX }
        ));
        let debug = format!("{:?}", RcEndpoint::new(1, roce_gid(), 0x42, 7).unwrap());
        assert!(debug.contains("::ffff:192.0.2.7") && debug.contains("0x42"), "{debug}");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json_round_trip_and_validation() {
        let ep = RcEndpoint::new(3, roce_gid(), 0xab_cdef, 0x12).unwrap();
        let json = serde_json::to_string(&ep).unwrap();
        assert_eq!(
            json,
            r#"{"lid":3,"gid":"::ffff:192.0.2.7","qp_number":11259375,"psn":18}"#
        );
        assert_eq!(serde_json::from_str::<RcEndpoint>(&json).unwrap(), ep);
        for bad in [
            r#"{"lid":3,"gid":"::1","qp_number":16777216,"psn":0}"#,
            r#"{"lid":3,"gid":"::1","qp_number":1,"psn":16777216}"#,
            r#"{"lid":3,"gid":"nope","qp_number":1,"psn":0}"#,
            r#"{"lid":3,"gid":"::1","qp_number":1}"#,
            r#"{"lid":3,"gid":"::1","qp_number":1,"psn":0,"extra":1}"#,
        ] {
            assert!(serde_json::from_str::<RcEndpoint>(bad).is_err(), "accepted {bad}");
        }
    }
}
