//! DCI streams on the post guard: a request addressed on one stream of a DC initiator built with
//! streams ([`setup_dc_addr_stream`](DcDestinationHandle::setup_dc_addr_stream),
//! `mlx5dv_wr_set_dc_addr_stream`).
use rdma_mummy_sys::mlx5dv_wr_set_dc_addr_stream;

use super::initiator::{DcDestinationHandle, DcLocalBufferHandle};
use crate::ibverbs::address_handle::AddressHandle;

impl<'g> DcDestinationHandle<'g> {
    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`).
    ///
    /// # Safety
    ///
    /// The guard's DC initiator must have been built with streams (`setup_dci_streams`), whose
    /// build checked this setter (libmlx5 before rdma-core 37 has none, and nothing else tells:
    /// such a build is refused, `MissingProviderEntry`); for the guard of adopted views
    /// ([`start_adopted`](super::initiator::DcPostSendGuard::start_adopted)), created with
    /// streams by a provider that filled `wr_set_dc_addr_stream`.
    #[inline]
    pub unsafe fn setup_dc_addr_stream(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> DcLocalBufferHandle<'g> {
        // SAFETY: right after the request's builder on the guard's live queue pair; the setter
        // is the caller's promise; `ah` is borrowed until the data step (libmlx5 copies it here).
        self.setup_address(|mlx5| unsafe {
            mlx5dv_wr_set_dc_addr_stream(mlx5.as_ptr(), ah.ah().as_ptr(), dct_number, dc_key, stream_id)
        })
    }
}

#[cfg(test)]
mod tests {
    //! The stream setter a DC initiator's build checks, read from a hand-made table.
    use std::mem::MaybeUninit;
    use std::ptr::NonNull;

    use rdma_mummy_sys::{ibv_ah, ibv_data_buf, ibv_qp_ex, ibv_sge, mlx5dv_qp_ex};
    use sideway::ibverbs::queue_pair::SendOperationFlags;

    use crate::mlx5::dc::initiator::post_send::DcSendView;

    unsafe extern "C" fn batch(_: *mut ibv_qp_ex) {}
    unsafe extern "C" fn complete(_: *mut ibv_qp_ex) -> i32 {
        0
    }
    unsafe extern "C" fn send(_: *mut ibv_qp_ex) {}
    unsafe extern "C" fn sge(_: *mut ibv_qp_ex, _: u32, _: u64, _: u32) {}
    unsafe extern "C" fn sge_list(_: *mut ibv_qp_ex, _: usize, _: *const ibv_sge) {}
    unsafe extern "C" fn inline(_: *mut ibv_qp_ex, _: *mut std::ffi::c_void, _: usize) {}
    unsafe extern "C" fn inline_list(_: *mut ibv_qp_ex, _: usize, _: *const ibv_data_buf) {}
    unsafe extern "C" fn dc_addr(_: *mut mlx5dv_qp_ex, _: *mut ibv_ah, _: u32, _: u64) {}
    unsafe extern "C" fn dc_addr_stream(_: *mut mlx5dv_qp_ex, _: *mut ibv_ah, _: u32, _: u64, _: u16) {}

    /// The tables of a DC initiator created with SEND by a provider without the stream setter
    /// (libmlx5 before rdma-core 37).
    fn without_stream_setter() -> (ibv_qp_ex, mlx5dv_qp_ex) {
        // SAFETY: zeroes are valid for both (plain data and optional function pointers).
        let (mut qp, mut mlx5): (ibv_qp_ex, mlx5dv_qp_ex) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        qp.wr_start = Some(batch);
        qp.wr_complete = Some(complete);
        qp.wr_abort = Some(batch);
        qp.wr_send = Some(send);
        qp.wr_set_sge = Some(sge);
        qp.wr_set_sge_list = Some(sge_list);
        qp.wr_set_inline_data = Some(inline);
        qp.wr_set_inline_data_list = Some(inline_list);
        mlx5.wr_set_dc_addr = Some(dc_addr);
        (qp, mlx5)
    }

    #[test]
    fn a_dc_initiator_with_streams_needs_the_stream_setter() {
        let (mut qp, mut mlx5) = without_stream_setter();
        let check = |qp: &mut ibv_qp_ex, mlx5: &mut mlx5dv_qp_ex, streams| {
            // SAFETY: both tables are alive for the call, which only reads them.
            unsafe {
                DcSendView::new(
                    NonNull::from(qp),
                    NonNull::from(mlx5),
                    SendOperationFlags::Send,
                    streams,
                )
            }
            .map(|_| ())
        };
        assert_eq!(
            check(&mut qp, &mut mlx5, false),
            Ok(()),
            "without streams, no stream setter"
        );
        assert_eq!(check(&mut qp, &mut mlx5, true), Err("wr_set_dc_addr_stream"));
        mlx5.wr_set_dc_addr_stream = Some(dc_addr_stream);
        assert_eq!(check(&mut qp, &mut mlx5, true), Ok(()));
        mlx5.wr_set_dc_addr = None;
        assert_eq!(check(&mut qp, &mut mlx5, false), Err("wr_set_dc_addr"));
    }
}
