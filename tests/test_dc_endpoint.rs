//! `DcEndpoint::create_ah` on the device named by `SIDEWAY_EXT_TEST_DEVICE` (`#[ignore]`d device
//! tests; `rxe0`, a RoCE port, in the SoftRoCE VM): an endpoint built from the local port's GID
//! gets a global address handle, and one that says InfiniBand is a link-layer mismatch.
#![cfg(feature = "mlx5")]
mod common;

use std::sync::Arc;

use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway_ext::ibverbs::address_handle::{CreateAddressHandleErrorKind, DEFAULT_HOP_LIMIT};
use sideway_ext::mlx5::dc::endpoint::{CreateDcAddressHandleErrorKind, DcEndpoint};

/// The test device's context and a PD. These tests assume port 1 is RoCE (rxe0 is).
fn roce_device() -> (Arc<DeviceContext>, Arc<ProtectionDomain>) {
    let ctx = common::open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    (ctx, pd)
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dc_endpoint_on_roce_gets_a_global_address_handle() {
    let (ctx, pd) = roce_device();
    let (gid_index, gid) = common::local_gid(&ctx);
    let endpoint = DcEndpoint::new(0, gid, 0x12_3456, 0xdc, true).expect("endpoint");
    let ah = endpoint
        .create_ah(&pd, 1, gid_index)
        .unwrap_or_else(|e| panic!("create_ah on a RoCE port (is the test device RoCE?): {e}: {:?}", e.0));
    let attr = ah.attribute();
    assert!(attr.is_global());
    assert_eq!(attr.port(), 1);
    assert_eq!(attr.dest_gid(), gid);
    assert_eq!(attr.src_gid_index(), gid_index);
    assert_eq!(attr.hop_limit(), DEFAULT_HOP_LIMIT);
    // Callers cache one handle per destination, but a second one for the same endpoint is allowed.
    let again = endpoint.create_ah(&pd, 1, gid_index).expect("second handle");
    assert_eq!(again.attribute().dest_gid(), gid);
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dc_endpoint_infiniband_on_a_roce_port_is_a_link_layer_mismatch() {
    let (ctx, pd) = roce_device();
    let (gid_index, gid) = common::local_gid(&ctx);
    let endpoint = DcEndpoint::new(1, gid, 0x12_3456, 0xdc, false).expect("endpoint");
    let err = endpoint
        .create_ah(&pd, 1, gid_index)
        .expect_err("an InfiniBand endpoint from a RoCE port");
    assert!(
        matches!(
            err.0,
            CreateDcAddressHandleErrorKind::LinkLayerMismatch {
                port: 1,
                local_is_roce: true,
                remote_is_roce: false
            }
        ),
        "{:?}",
        err.0
    );
    assert_eq!(
        err.0.to_string(),
        "local port 1 is RoCE (Ethernet) but the endpoint's port is InfiniBand"
    );
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dc_endpoint_from_a_port_that_does_not_exist_is_invalid_port() {
    let (ctx, pd) = roce_device();
    let (gid_index, gid) = common::local_gid(&ctx);
    let endpoint = DcEndpoint::new(0, gid, 1, 0, true).expect("endpoint");
    for port in [0, 200] {
        let err = endpoint.create_ah(&pd, port, gid_index).expect_err("no such port");
        match err.0 {
            CreateDcAddressHandleErrorKind::AddressHandle(ref inner) => assert!(
                matches!(inner.0, CreateAddressHandleErrorKind::InvalidPort { port: p, .. } if p == port),
                "{:?}",
                inner.0
            ),
            ref other => panic!("port {port}: {other:?}"),
        }
    }
}
