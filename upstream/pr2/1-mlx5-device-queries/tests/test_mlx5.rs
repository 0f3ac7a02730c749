#![cfg(feature = "mlx5")]
use sideway::ibverbs::device::DeviceList;
use sideway::mlx5::device_attributes::Mlx5ContextMask;
use sideway::mlx5::device_context::{Mlx5DeviceContext, QueryMlx5DeviceErrorKind};

/// Every device answers: an mlx5 one with its attributes and DC, any other with the typed "not
/// supported", and the DC summary works on both, with the RC depths of `ibv_query_device`.
#[test]
fn query_device_on_every_device() -> Result<(), Box<dyn std::error::Error>> {
    let list = DeviceList::new()?;
    assert!(list.iter().next().is_some(), "no RDMA device");
    for device in &list {
        let ctx = device.open()?;
        let mlx5 = Mlx5DeviceContext::new(ctx.clone());
        let dc = mlx5.query_dc_capabilities()?;
        match mlx5.query_device() {
            Ok(attr) => {
                assert!(mlx5.is_mlx5() && dc.is_mlx5() && dc.is_supported());
                // The provider clears the bits it did not fill, and sets no bit it was not asked.
                assert!(Mlx5ContextMask::all_flags().contains(attr.comp_mask()));
                assert_eq!(dc.max_dc_rd_atom(), attr.max_dc_rd_atom().filter(|&depth| depth != 0));
            },
            Err(err) => {
                assert!(matches!(err.0, QueryMlx5DeviceErrorKind::NotSupported), "{err:?}");
                assert!(err.is_not_supported() && !mlx5.is_mlx5());
                assert!(!dc.is_mlx5() && !dc.is_supported());
                assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (None, None));
                assert_eq!((dc.dci_streams(), dc.dc_odp()), (None, None));
            },
        }
        let attr = ctx.query_device()?;
        assert_eq!(dc.rc_max_qp_rd_atom(), attr.max_qp_rd_atom().max(0) as u32);
        assert_eq!(dc.rc_max_qp_init_rd_atom(), attr.max_qp_init_rd_atom().max(0) as u32);
    }
    Ok(())
}
