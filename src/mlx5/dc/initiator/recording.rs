//! A DC initiator's function tables that record every provider call (no device), for the unit
//! tests of the DC transport: every `ibv_qp_ex` entry a DC initiator may call, and the mlx5
//! view's DC setters.
use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};

use crate::ibverbs::post_send_guard::recording::{record, recording_qp};

// The entries recording_qp lacks.
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    record(format!(
        "write_imm wr_id={} rkey={rkey:#x} addr={addr:#x} imm={imm:#x}",
        (*qp).wr_id
    ));
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    record(format!("read wr_id={} rkey={rkey:#x} addr={addr:#x}", (*qp).wr_id));
}
unsafe extern "C" fn wr_atomic_cmp_swp(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, compare: u64, swap: u64) {
    record(format!(
        "cmp_swp wr_id={} rkey={rkey:#x} addr={addr:#x} compare={compare} swap={swap}",
        (*qp).wr_id
    ));
}
unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    record(format!(
        "fetch_add wr_id={} rkey={rkey:#x} addr={addr:#x} add={add}",
        (*qp).wr_id
    ));
}
pub(crate) unsafe extern "C" fn wr_set_inline_data_list(
    _: *mut ibv_qp_ex, num: usize, list: *const rdma_mummy_sys::ibv_data_buf,
) {
    let bufs = std::slice::from_raw_parts(list, num);
    record(format!("inline_list {}", bufs.iter().map(|b| b.length).sum::<usize>()));
}
unsafe extern "C" fn wr_set_dc_addr(_: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, dctn: u32, key: u64) {
    record(format!("dc_addr ah={:#x} dctn={dctn:#x} key={key:#x}", ah as usize));
}
unsafe extern "C" fn wr_set_dc_addr_stream(_: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, dctn: u32, key: u64, stream: u16) {
    record(format!(
        "dc_addr_stream ah={:#x} dctn={dctn:#x} key={key:#x} stream={stream}",
        ah as usize
    ));
}

/// A DC initiator's tables: every `ibv_qp_ex` entry a DCI may call, and the mlx5 view.
pub(crate) fn recording_dci(streams: bool) -> (Box<ibv_qp_ex>, Box<mlx5dv_qp_ex>) {
    let mut qp = recording_qp();
    qp.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    qp.wr_rdma_read = Some(wr_rdma_read);
    qp.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    qp.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    qp.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    // SAFETY: zeroes are valid for mlx5dv_qp_ex (an integer and optional functions).
    let mut mlx5: Box<mlx5dv_qp_ex> = Box::new(unsafe { std::mem::MaybeUninit::zeroed().assume_init() });
    mlx5.wr_set_dc_addr = Some(wr_set_dc_addr);
    if streams {
        mlx5.wr_set_dc_addr_stream = Some(wr_set_dc_addr_stream);
    }
    (qp, mlx5)
}
