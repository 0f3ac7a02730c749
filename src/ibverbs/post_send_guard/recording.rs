//! A function table that records every provider call a guard makes (no device), for the unit
//! tests of the guard and of its transports.
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, ibv_sge};
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::ProviderEntries;

thread_local! {
    pub(crate) static CALLS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

pub(crate) fn record(call: String) {
    CALLS.with(|calls| calls.borrow_mut().push(call));
}

pub(crate) fn take_calls() -> Vec<String> {
    CALLS.with(|calls| std::mem::take(&mut *calls.borrow_mut()))
}

pub(crate) unsafe extern "C" fn wr_start(_: *mut ibv_qp_ex) {
    record("start".into());
}
pub(crate) unsafe extern "C" fn wr_complete(_: *mut ibv_qp_ex) -> i32 {
    record("complete".into());
    0
}
pub(crate) unsafe extern "C" fn wr_abort(_: *mut ibv_qp_ex) {
    record("abort".into());
}
unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    record(format!("send wr_id={} flags={:#x}", (*qp).wr_id, (*qp).wr_flags));
}
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    record(format!("send_imm wr_id={} imm={imm:#x}", (*qp).wr_id));
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    record(format!(
        "write wr_id={} flags={:#x} rkey={rkey:#x} addr={addr:#x}",
        (*qp).wr_id,
        (*qp).wr_flags
    ));
}
unsafe extern "C" fn wr_set_ud_addr(_: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    record(format!("ud_addr ah={:#x} qpn={qpn} qkey={qkey:#x}", ah as usize));
}
unsafe extern "C" fn wr_set_sge(_: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    record(format!("sge lkey={lkey:#x} addr={addr:#x} len={length}"));
}
unsafe extern "C" fn wr_set_sge_list(_: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    let list = std::slice::from_raw_parts(sg_list, num_sge);
    let lengths: Vec<u32> = list.iter().map(|sge| sge.length).collect();
    record(format!("sge_list {lengths:?}"));
}
pub(crate) unsafe extern "C" fn wr_set_inline_data(_: *mut ibv_qp_ex, addr: *mut std::ffi::c_void, length: usize) {
    let data = std::slice::from_raw_parts(addr as *const u8, length);
    record(format!("inline {:?}", String::from_utf8_lossy(data)));
}

/// A recording table with only the entries rxe fills for a queue pair created with SEND
/// only (start, complete, abort, send, the SGE and inline setters): every other is NULL.
pub(crate) fn send_only_recording_qp() -> Box<ibv_qp_ex> {
    // SAFETY: zeroes are valid for ibv_qp_ex (plain data and optional function pointers).
    let mut qp: Box<ibv_qp_ex> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    let full = recording_qp();
    qp.wr_start = full.wr_start;
    qp.wr_complete = full.wr_complete;
    qp.wr_abort = full.wr_abort;
    qp.wr_send = full.wr_send;
    qp.wr_set_sge = full.wr_set_sge;
    qp.wr_set_sge_list = full.wr_set_sge_list;
    qp.wr_set_inline_data = full.wr_set_inline_data;
    qp
}

/// A queue pair whose provider calls are recorded.
pub(crate) fn recording_qp() -> Box<ibv_qp_ex> {
    // SAFETY: ibv_qp_ex is plain data (and optional function pointers) for which zeroes are valid.
    let mut qp: Box<ibv_qp_ex> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    qp.wr_start = Some(wr_start);
    qp.wr_complete = Some(wr_complete);
    qp.wr_abort = Some(wr_abort);
    qp.wr_send = Some(wr_send);
    qp.wr_send_imm = Some(wr_send_imm);
    qp.wr_rdma_write = Some(wr_rdma_write);
    qp.wr_set_ud_addr = Some(wr_set_ud_addr);
    qp.wr_set_sge = Some(wr_set_sge);
    qp.wr_set_sge_list = Some(wr_set_sge_list);
    qp.wr_set_inline_data = Some(wr_set_inline_data);
    qp
}

/// The entries of every operation, as a queue pair created with all of them has.
pub(crate) fn all_entries(qp: &mut ibv_qp_ex) -> ProviderEntries {
    // SAFETY: qp is a live ibv_qp_ex.
    unsafe {
        ProviderEntries::new(
            NonNull::from(qp),
            SendOperationFlags::Send | SendOperationFlags::SendWithImmediate | SendOperationFlags::Write,
        )
    }
    .expect("the recording table fills these")
}
