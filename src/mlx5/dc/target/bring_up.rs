//! How a DC target is brought to RTR: [`DcTargetBringUp`] and the two transitions' attributes.
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway::ibverbs::AccessFlags;

use super::super::endpoint::{DcServiceClass, DEFAULT_HOP_LIMIT};
use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::source_gid::SourceGid;

/// How [`DcTarget::bring_up`](super::DcTarget::bring_up) brings a DC target to RTR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcTargetBringUp {
    pub(super) port: u8,
    pub(super) pkey_index: u16,
    pub(super) path_mtu: Option<Mtu>,
    pub(super) min_rnr_timer: u8,
    pub(super) source_gid: SourceGid,
    pub(super) hop_limit: u8,
    pub(super) class: DcServiceClass,
}

impl DcTargetBringUp {
    /// The defaults, on local port `port` (from 1).
    pub fn new(port: u8) -> Self {
        Self {
            port,
            pkey_index: 0,
            path_mtu: None,
            min_rnr_timer: 12,
            source_gid: SourceGid::Automatic,
            hop_limit: DEFAULT_HOP_LIMIT,
            class: DcServiceClass::new(),
        }
    }

    /// The P_Key index (default 0).
    pub fn setup_pkey_index(&mut self, pkey_index: u16) -> &mut Self {
        self.pkey_index = pkey_index;
        self
    }

    /// The path MTU (default: the port's active MTU), which the target's endpoint announces:
    /// initiators must send no larger packets, and it answers READs in packets as large
    /// (`mlx5_ib_modify_dct`, `dctc.mtu`).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.path_mtu = Some(path_mtu);
        self
    }

    /// The minimum RNR NAK timer (default 12).
    pub fn setup_min_rnr_timer(&mut self, min_rnr_timer: u8) -> &mut Self {
        self.min_rnr_timer = min_rnr_timer;
        self
    }

    /// The local GID its address vector is global with and its endpoint announces (default
    /// [`SourceGid::Automatic`]).
    pub fn setup_source_gid(&mut self, source_gid: SourceGid) -> &mut Self {
        self.source_gid = source_gid;
        self
    }

    /// [`setup_source_gid`](Self::setup_source_gid) with [`SourceGid::Index`].
    pub fn setup_src_gid_index(&mut self, src_gid_index: u8) -> &mut Self {
        self.setup_source_gid(SourceGid::Index(src_gid_index))
    }

    /// The GRH hop limit of a global address vector (default [`DEFAULT_HOP_LIMIT`]).
    pub fn setup_hop_limit(&mut self, hop_limit: u8) -> &mut Self {
        self.hop_limit = hop_limit;
        self
    }

    /// The class of its ACKs and READ and atomic responses (default all 0): its initiators'
    /// ([`DcServiceClass`]).
    pub fn setup_service_class(&mut self, class: DcServiceClass) -> &mut Self {
        self.class = class;
        self
    }

    /// The attributes of RESET → INIT and INIT → RTR (global from the resolved `src_gid_index`).
    pub(crate) fn attributes(
        &self, access_flags: AccessFlags, path_mtu: Mtu, src_gid_index: Option<u8>,
    ) -> [QueuePairAttribute; 2] {
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port)
            .setup_access_flags(access_flags);
        let mut av = AddressHandleAttribute::new();
        av.setup_port(self.port);
        if let Some(index) = src_gid_index {
            av.setup_grh_src_gid_index(index).setup_grh_hop_limit(self.hop_limit);
        }
        self.class.apply_to(&mut av);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu)
            .setup_min_rnr_timer(self.min_rnr_timer)
            .setup_address_vector(&av);
        [init, rtr]
    }
}

#[cfg(test)]
mod tests {
    use sideway::ibverbs::queue_pair::QueuePairAttributeMask;

    use super::*;
    use crate::mlx5::dc::state_table::{check, DC_TARGET_TRANSITIONS};

    /// Whether the DC target's table takes `attr` in state `from`.
    fn takes(from: QueuePairState, attr: &QueuePairAttribute) -> bool {
        check(&DC_TARGET_TRANSITIONS, from, attr.state(), attr.attr_mask).is_ok()
    }

    #[test]
    fn bring_up_attributes_pass_the_dc_table() {
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        let [init, rtr] = DcTargetBringUp::new(1).attributes(access, Mtu::Mtu4096, None);
        assert!(takes(QueuePairState::Reset, &init));
        assert!(takes(QueuePairState::Init, &rtr));
        assert_eq!(rtr.attr.min_rnr_timer, 12);
        assert!(!rtr.attr_mask.contains(QueuePairAttributeMask::MaxDestinationReadAtomic));
        // RoCE: a global address vector from the source GID index.
        let mut roce = DcTargetBringUp::new(1);
        let [_, rtr] = roce.attributes(access, Mtu::Mtu1024, Some(3));
        assert!(rtr.attr.ah_attr.is_global != 0);
        assert_eq!(
            (rtr.attr.ah_attr.grh.sgid_index, rtr.attr.ah_attr.grh.hop_limit),
            (3, DEFAULT_HOP_LIMIT),
            "the hop limit of the initiators' address handles"
        );
        // By default class 0; with a class, the RTR address vector carries it.
        assert_eq!(
            (
                rtr.attr.ah_attr.grh.traffic_class,
                rtr.attr.ah_attr.grh.flow_label,
                rtr.attr.ah_attr.sl
            ),
            (0, 0, 0)
        );
        let mut class = DcServiceClass::new();
        class
            .setup_traffic_class(26 << 2)
            .setup_flow_label(7)
            .setup_service_level(3);
        roce.setup_service_class(class);
        let [_, rtr] = roce.attributes(access, Mtu::Mtu1024, Some(3));
        assert_eq!(
            (
                rtr.attr.ah_attr.grh.traffic_class,
                rtr.attr.ah_attr.grh.flow_label,
                rtr.attr.ah_attr.sl
            ),
            (104, 7, 3)
        );
        assert!(takes(QueuePairState::Init, &rtr));
    }
}
