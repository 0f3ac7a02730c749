//! A DC initiator pool's send CQ shared with another queue pair, on a completion channel, on a
//! real device (SoftRoCE in the VM).
mod common;

use common::loopback::{loopback, Kind, EVENT_TIMEOUT};
use sideway_ext::ibverbs::extension::{CompletionChannelExt, CompletionQueueEventExt};
use sideway_ext::mlx5::dc::initiator::DcInitiator;
use sideway_ext_dc_pool::settings::DcPoolSettings;
use sideway_ext_dc_pool::types::DcPoolEvent;
use sideway_ext_dc_pool::DcInitiatorPool;

/// A DCI pool's send CQ shared with another queue pair, on a completion channel: armed through
/// the pool, the caller sleeps on the channel, wakes for the other queue pair's completion,
/// drains the CQ through the pool (which hands that completion over, never drops it), re-arms,
/// and sleeps again. rxe has no DC, so the pool here has no initiator of its own: what is
/// checked is the progress path a caller drives (arm, wait, poll, re-arm), on a pool made
/// [`from_initiators`](DcInitiatorPool::from_initiators) (none) and given the CQ.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn a_dci_pool_on_a_shared_cq_sleeps_on_the_channel_wakes_drains_and_rearms() {
    let mut lb = loopback(Kind::Basic);
    let mut pool =
        DcInitiatorPool::<DcInitiator>::from_initiators(Vec::new(), Some(lb.cq.clone()), &DcPoolSettings::default())
            .expect("a pool of no initiator");
    let sender = lb.sender.qp_number();
    for (round, wr_id) in [(0u8, 40u64), (1, 41)] {
        pool.send_cq()
            .expect("the pool's CQ")
            .req_notify_cq(false)
            .expect("arm the pool's CQ");
        lb.write(wr_id, 0x30 + round);
        // Sleep on the channel until the completion wakes us.
        let event = lb
            .channel
            .get_cq_event()
            .expect("a blocking get_cq_event wakes for the completion");
        assert!(event.is_for(pool.send_cq().expect("the pool's CQ")));
        drop(event);
        // Drain: the other queue pair's completion comes back whole.
        let mut events = Vec::new();
        let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
        while events.is_empty() {
            pool.poll(|e| events.push(e)).expect("poll");
            assert!(std::time::Instant::now() < deadline, "the completion is in the CQ");
        }
        match &events[..] {
            [DcPoolEvent::OtherCompletion(wc)] => {
                assert_eq!((wc.qp_number(), wc.wr_id()), (sender, wr_id));
                assert!(wc.is_success(), "{wc:?}");
            },
            other => panic!("round {round}: {other:?}"),
        }
        assert_eq!(lb.remote.read(0, 8), [0x30 + round; 8]);
        // Nothing more, and no event until re-armed.
        assert_eq!(pool.poll(|e| panic!("nothing left: {e:?}")).expect("poll"), 0);
        assert!(lb.channel.try_get_cq_event().expect("read").is_none());
    }
}
