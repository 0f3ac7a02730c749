//! A [`Gid`](sideway::ibverbs::address::Gid) as an [`Ipv6Addr`](std::net::Ipv6Addr) for serde
//! (`#[serde(with = "…::gid_as_ipv6")]`): text in human-readable formats, 16 octets otherwise,
//! for the GIDs of the endpoints peers exchange.
use std::net::Ipv6Addr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sideway::ibverbs::address::Gid;

/// Serializes `gid` as the IPv6 address it is.
pub(crate) fn serialize<S: Serializer>(gid: &Gid, serializer: S) -> Result<S::Ok, S::Error> {
    Ipv6Addr::from(*gid).serialize(serializer)
}

/// Deserializes an IPv6 address into the GID it is.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Gid, D::Error> {
    Ipv6Addr::deserialize(deserializer).map(Gid::from)
}
