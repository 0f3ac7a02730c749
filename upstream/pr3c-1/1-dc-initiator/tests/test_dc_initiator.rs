#![cfg(feature = "mlx5")]
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState, SendOperationFlags};
use sideway::mlx5::dc::initiator::{CreateDcInitiatorErrorKind, DC_SEND_OPERATIONS};
use sideway::mlx5::device_context::Mlx5DeviceContext;

/// On every device: a DC initiator without its send CQ, or with an operation DC cannot post, is
/// refused before the library; with its send CQ it is created where the device has DC (mlx5), in
/// RESET, granted at least the send queue it asked for and the operations the device can do, and
/// moves to INIT through the DC initiator's table; on any other device its creation is the typed
/// "not supported".
#[test]
fn dc_initiator_on_every_device() -> Result<(), Box<dyn std::error::Error>> {
    let list = DeviceList::new()?;
    assert!(list.iter().next().is_some(), "no RDMA device");
    for device in &list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq_builder().setup_cqe(64).build()?;

        let err = pd.create_dci_builder().build().unwrap_err();
        assert!(
            matches!(err.0, CreateDcInitiatorErrorKind::MissingSendCompletionQueue),
            "{err:?}"
        );
        let err = pd
            .create_dci_builder()
            .setup_send_cq(cq.clone())
            .setup_send_ops_flags(SendOperationFlags::Send | SendOperationFlags::LocalInvalidate)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err.0,
                CreateDcInitiatorErrorKind::UnsupportedSendOperations {
                    allowed: DC_SEND_OPERATIONS,
                    ..
                }
            ),
            "{err:?}"
        );

        let dc = Mlx5DeviceContext::new(ctx.clone()).query_dc_capabilities()?;
        let mut builder = pd.create_dci_builder();
        builder.setup_send_cq(cq).setup_max_send_wr(20);
        let built = builder.build();
        if !dc.is_supported() {
            let err = built.unwrap_err();
            assert!(err.is_not_supported(), "{err:?}");
            continue;
        }
        // A ConnectX with DC (not run yet: the SoftRoCE VM has none).
        let mut dci = built?;
        assert_eq!(dci.state(), QueuePairState::Reset);
        assert!(dci.max_send_wr() >= 20);
        assert_eq!(dci.send_ops_flags().bits() & !DC_SEND_OPERATIONS.bits(), 0);
        assert!(dci.max_read_atomic() >= 1);
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend);
        assert!(
            dci.modify(&rts).is_err(),
            "RESET -> RTS is not a DC initiator's transition"
        );
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(1);
        dci.modify(&init)?;
        assert_eq!(dci.state(), QueuePairState::Init);
    }
    Ok(())
}

/// Where the device has DC: a DC target and a DC initiator on port 1, each brought up with
/// `modify` (RESET → INIT → RTR, and on to RTS), and one inline RDMA WRITE addressed to the target
/// with `setup_dc_addr` lands in the target's memory.
#[test]
fn dc_initiator_writes_to_a_dc_target() -> Result<(), Box<dyn std::error::Error>> {
    use sideway::ibverbs::address::{AddressHandleAttribute, GidType};
    use sideway::ibverbs::completion::{PollCompletionQueueError, WorkCompletionStatus};
    use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
    use sideway::ibverbs::AccessFlags;
    use std::time::{Duration, Instant};

    for device in &DeviceList::new()? {
        let ctx = device.open()?;
        if !Mlx5DeviceContext::new(ctx.clone())
            .query_dc_capabilities()?
            .is_supported()
        {
            continue;
        }
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq_builder().setup_cqe(16).build()?;
        let port = ctx.query_port(1)?;
        let mut av = AddressHandleAttribute::new();
        av.setup_port(1);
        let roce_v2 = (ctx.query_gid_table()?.into_iter())
            .find(|entry| entry.port_num() == 1 && entry.gid_type() == GidType::RoceV2);
        if let Some(entry) = roce_v2 {
            av.setup_grh_dest_gid(&entry.gid())
                .setup_grh_src_gid_index(entry.gid_index() as u8)
                .setup_grh_hop_limit(64);
        } else {
            av.setup_dest_lid(port.lid());
        }
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(cq.clone())
            .setup_srq(&pd.create_srq_builder().build()?)
            .setup_dc_key(0xd0d0)
            .setup_access_flags(access)
            .build()?;
        let mut dci = pd.create_dci_builder().setup_send_cq(cq.clone()).build()?;
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(1);
        dci.modify(&init)?;
        dct.modify(init.setup_access_flags(access))?;
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(port.active_mtu());
        dci.modify(&rtr)?;
        dct.modify(rtr.setup_min_rnr_timer(12).setup_address_vector(&av))?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1)
            .setup_sq_psn(0);
        dci.modify(&rts)?;
        assert_eq!(dci.state(), QueuePairState::ReadyToSend);

        let ah = pd.create_ah(&av)?;
        let mut buffer = vec![0u8; 64];
        // SAFETY: the buffer outlives the memory region, which is dropped first.
        let mr = unsafe { pd.reg_mr(buffer.as_mut_ptr() as usize, buffer.len(), access) }?;
        let mut guard = dci.start_post_send();
        guard
            .construct_wr(7, WorkRequestFlags::Signaled)
            .setup_write(mr.rkey(), mr.get_ptr() as u64)
            .setup_dc_addr(&ah, dct.dct_number().ok_or("no DCT number")?, dct.dc_key())
            .setup_inline_data(b"over DC");
        guard.post()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let wr_id = loop {
            match cq.start_poll() {
                Ok(mut poller) => {
                    let wc = poller.next().ok_or("an empty poll")?;
                    assert_eq!(wc.status(), WorkCompletionStatus::Success as u32);
                    break wc.wr_id();
                },
                Err(PollCompletionQueueError::CompletionQueueEmpty) if Instant::now() < deadline => {
                    std::thread::yield_now()
                },
                Err(err) => return Err(err.into()),
            }
        };
        assert_eq!(wr_id, 7);
        drop(mr);
        assert_eq!(&buffer[..7], b"over DC");
    }
    Ok(())
}
