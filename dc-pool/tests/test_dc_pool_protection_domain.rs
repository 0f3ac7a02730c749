//! A pool made from initiators of one's own ([`DcInitiatorPool::from_initiators`]) and given a
//! protection domain ([`DcPoolSettings::setup_protection_domain`]) creates its destinations'
//! address handles on it, on a real device (SoftRoCE in the VM): here simulated DC initiators,
//! whose DC setter routes by DCT number and takes any address handle, behind a pool whose
//! address handles are the device's.
mod common;

use sideway::ibverbs::device_context::LinkLayer;
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::mlx5::dc::endpoint::{DcEndpoint, DcServiceClass};
use sideway_ext_dc_pool::settings::DcPoolSettings;
use sideway_ext_dc_pool::simulation::SimulatedFabric;
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy};
use sideway_ext_dc_pool::DcInitiatorPool;

/// With the protection domain, a destination added by its endpoint gets an address handle of
/// the device's (none without: the pool borrows its initiators' own), which the pool frees with
/// the destination, and the pool's requests reach their target.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn a_pool_made_from_initiators_creates_address_handles_on_the_protection_domain_given() {
    let ctx = common::open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    // The port's GID the pool's address handles are sent from (index 0: the pool's initiators
    // name no other), as the destination's: the device's own address.
    let gid = ctx.query_gid(1, 0).expect("port 1's GID 0");
    let is_roce = ctx.query_port(1).expect("query port 1").link_layer() == LinkLayer::Ethernet;
    let fabric = SimulatedFabric::new(3);
    let target = fabric.create_target_builder().build().expect("a target");
    let region = target
        .register_memory(0..64, AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
        .expect("the target's region");
    let endpoint = DcEndpoint::new(0, gid, target.dct_number(), target.endpoint().dc_key(), is_roce)
        .expect("the device's endpoint");
    let pool = |with_pd: bool| {
        let initiator = fabric.create_dci_builder().build().expect("an initiator");
        let mut settings = DcPoolSettings::default();
        settings.setup_policy(DcPoolPolicy::Static);
        if with_pd {
            settings.setup_protection_domain(&pd, 1, DcServiceClass::new());
        }
        DcInitiatorPool::from_initiators(vec![initiator], Some(fabric.create_cq()), &settings).expect("a pool")
    };
    let mut without = pool(false);
    let destination = without.add_destination(endpoint);
    without.prepare(destination).expect("the initiators' own handle");
    assert_eq!(without.footprint().address_handles, 0, "borrowed, not the pool's");

    let mut pool = pool(true);
    let destination = pool.add_destination(endpoint);
    pool.prepare(destination).expect("an address handle on the device");
    assert_eq!(pool.footprint().address_handles, 1);
    let mut guard = pool.start_post_send(destination).expect("an initiator");
    guard
        .construct_wr(7, WorkRequestFlags::none())
        .expect("room")
        .setup_write(region.rkey(), region.address() + 8)
        .setup_inline_data(b"pd-given");
    guard.post().expect("posted");
    let mut events = Vec::new();
    while events.is_empty() {
        pool.poll(|event| events.push(event)).expect("poll");
    }
    assert_eq!(events, [DcPoolEvent::Completed { destination, wr_id: 7 }]);
    assert_eq!(target.read(8..16).as_deref(), Some(&b"pd-given"[..]));
    pool.remove_destination(destination).expect("nothing outstanding");
    assert_eq!(pool.footprint().address_handles, 0, "freed with the destination");
}
