//! The self-test's direct step: the same loopback reached through the crate
//! `sideway-ext-dc-direct`, whose DC initiator writes its own WQEs and rings its own doorbell
//! (a `DirectDcInitiator`), its completions polled from the CQ's memory (a
//! `DirectCompletionQueue`): an RDMA WRITE and a 16-byte inline SEND into the target's shared
//! receive queue, each checked by the bytes that arrived. The DC initiator is made on a thread
//! domain of its own and taken by the safe constructor, `DirectDcInitiator::new`, as a program
//! would; where no thread domain can be had, without one, which the safe constructor takes only
//! with a doorbell register.
use std::time::Instant;

use sideway::ibverbs::completion::WorkCompletionStatus;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::initiator::thread_domain::CreateDcInitiatorOnThreadDomainErrorKind;
use sideway_ext::mlx5::device_attributes::Mlx5ContextFlags;
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_direct::completion_queue::{Completion, CreateDirectCompletionQueueErrorKind};
use sideway_ext_dc_direct::send_queue::AddressVector;
use sideway_ext_dc_direct::{
    CreateDirectDcInitiatorErrorKind, DirectCompletionQueue, DirectDcInitiator, DirectRegister, OwnedDcInitiator,
};

use super::{cq, pattern, success, Loopback, Result, KEY, LEN, TIMEOUT};
use crate::chain;
use crate::report::SelftestReport;

/// What the step found.
pub enum Verdict {
    /// It ran: passed with what it saw, or failed with why.
    Checked(Result<String>),
    /// It could not run here, and why.
    Skipped(String),
}

/// Why the direct path cannot run here, for a refusal that says so (not a failure): the CPU,
/// libmlx5 signing its WQEs, or no thread domain to be had (`no_thread_domain`, why) and, without
/// one, a BlueFlame register libmlx5 may share.
pub fn skip_reason(refused: &CreateDirectDcInitiatorErrorKind, no_thread_domain: Option<&str>) -> Option<String> {
    match (refused, no_thread_domain) {
        (CreateDirectDcInitiatorErrorKind::UnsupportedArchitecture { architecture }, _) => Some(format!(
            "the direct path is built and checked for x86-64 only, not {architecture}"
        )),
        (CreateDirectDcInitiatorErrorKind::WqeSignatures, _) => {
            Some("MLX5_QP_SIGNATURE is set: libmlx5 signs its WQEs, which the direct path does not".into())
        },
        (CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned { blueflame_size }, Some(why)) => Some(format!(
            "no thread domain ({why}), and without one the register is a BlueFlame register of {blueflame_size} \
             bytes a half libmlx5 may share, which the safe constructor refuses"
        )),
        _ => None,
    }
}

/// What the direct initiator rings, and whether the device has BlueFlame (`flags`, when
/// `mlx5dv_query_device` answered).
pub fn register_line(register: DirectRegister, flags: Option<Mlx5ContextFlags>) -> String {
    let which = match register {
        DirectRegister::ThreadDomain { blueflame_size: 0 } => "its thread domain's doorbell register".to_string(),
        DirectRegister::ThreadDomain { blueflame_size } => {
            format!("its thread domain's BlueFlame register, {blueflame_size} bytes a half")
        },
        DirectRegister::Doorbell => "a doorbell register, no thread domain".to_string(),
        DirectRegister::Promised { blueflame_size } => {
            format!("a BlueFlame register on promise, {blueflame_size} bytes a half")
        },
        other => format!("{other:?}"),
    };
    let exists = flags.and_then(|flags| register.blueflame_exists(flags));
    let exists = match exists {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown (no thread domain's register says, and libmlx5 before rdma-core 58 does not report it)",
    };
    format!("register: {which}; BlueFlame: {exists}")
}

/// Runs the step on the loopback, with a CQ and a DC initiator of its own; records in `report`
/// whether the device has BlueFlame and the size of the register the direct initiator rings.
pub fn direct_path(
    lb: &mut Loopback, ctx: &std::sync::Arc<sideway::ibverbs::device_context::DeviceContext>,
    report: &mut SelftestReport,
) -> Verdict {
    let flags = Mlx5DeviceContext::new(ctx.clone())
        .query_device()
        .ok()
        .map(|attr| attr.flags());
    // The flag alone, until a direct initiator's register says more (rdma-core 58+ reports it).
    report.blueflame(flags.and_then(|flags| flags.contains(Mlx5ContextFlags::BlueFlame).then_some(true)));
    let send_cq = match cq(ctx) {
        Ok(send_cq) => send_cq,
        Err(why) => return Verdict::Checked(Err(why)),
    };
    // SAFETY: nothing polls this CQ but the direct CQ, and only the direct initiator below
    // completes into it.
    let direct_cq = match unsafe { DirectCompletionQueue::new(send_cq.clone()) } {
        Ok(direct_cq) => direct_cq,
        Err(err) => {
            return match err.0 {
                CreateDirectCompletionQueueErrorKind::UnsupportedArchitecture { architecture } => Verdict::Skipped(
                    format!("the direct path is built and checked for x86-64 only, not {architecture}"),
                ),
                _ => Verdict::Checked(Err(format!("the direct CQ: {}", chain(&err)))),
            }
        },
    };
    let mut builder = lb.pd.create_dci_builder();
    builder.setup_send_cq(send_cq).setup_max_send_wr(16);
    // Without a thread domain where none can be had (a kernel without dynamic UAR allocation
    // has a fixed number of registers for them, and none on a device without BlueFlame).
    let (dci, no_thread_domain): (OwnedDcInitiator, _) = match builder.build_on_thread_domain() {
        Ok(dci) => (dci.into(), None),
        Err(err) if matches!(err.0, CreateDcInitiatorOnThreadDomainErrorKind::ThreadDomain(_)) => {
            match builder.build() {
                Ok(dci) => (dci.into(), Some(chain(&err))),
                Err(err) => return Verdict::Checked(Err(format!("create the DC initiator: {}", chain(&err)))),
            }
        },
        Err(err) => return Verdict::Checked(Err(format!("create the DC initiator: {}", chain(&err)))),
    };
    let mut direct = match DirectDcInitiator::new(dci, &direct_cq) {
        Ok(direct) => direct,
        Err(err) => {
            return match skip_reason(&err.0, no_thread_domain.as_deref()) {
                Some(why) => Verdict::Skipped(why),
                None => Verdict::Checked(Err(format!("the direct DC initiator: {}", chain(&err)))),
            }
        },
    };
    if let Some(flags) = flags {
        report.blueflame(direct.register().blueflame_exists(flags));
    }
    report.direct_register_size(Some(direct.register().blueflame_size()));
    let register = register_line(direct.register(), flags);
    Verdict::Checked(write_and_send(lb, &mut direct, direct_cq).map(|done| format!("{done}; {register}")))
}

/// A WRITE and an inline SEND through `direct`, completions polled from `direct_cq`.
fn write_and_send(
    lb: &mut Loopback, direct: &mut DirectDcInitiator, mut direct_cq: DirectCompletionQueue,
) -> Result<String> {
    direct
        .bring_up(&lb.addressing.initiator_bring_up())
        .map_err(|e| format!("the direct DC initiator to RTS: {}", chain(&e)))?;
    let av = AddressVector::from_address_handle(&lb.ah).map_err(|e| format!("the address vector: {}", chain(&e)))?;
    let (dct_number, qp_number) = (lb.endpoint.dct_number(), direct.dc_initiator().qp_number());

    lb.local.write(0, &pattern(LEN, 21));
    let mut guard = direct.start_post_send();
    let request = guard
        .construct_wr(21, WorkRequestFlags::Signaled)
        .setup_write(lb.remote.mr.rkey(), lb.remote.addr(0))
        .setup_dc_addr(&av, dct_number, KEY);
    // SAFETY: the local buffer lies in its memory region and outlives the request.
    unsafe { request.setup_sge(lb.local.mr.lkey(), lb.local.addr(0), LEN as u32) }
        .map_err(|e| format!("the write: {}", chain(&e)))?;
    guard.post();
    completed(&mut direct_cq, 21, qp_number)?;
    if lb.remote.read(0, LEN) != pattern(LEN, 21) {
        return Err("the bytes the direct WRITE left differ from those sent".into());
    }

    let mut receive = lb.srq.start_post_recv();
    // SAFETY: the remote buffer lies in its memory region and outlives the receive.
    unsafe {
        receive
            .construct_wr(22)
            .setup_sge(lb.remote.mr.lkey(), lb.remote.addr(0), LEN as u32)
    };
    receive.post().map_err(|e| format!("post a receive: {}", chain(&e)))?;
    let inline = pattern(16, 22);
    let mut guard = direct.start_post_send();
    guard
        .construct_wr(22, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(&av, dct_number, KEY)
        .setup_inline_data(&inline)
        .map_err(|e| format!("the inline send: {}", chain(&e)))?;
    guard.post();
    completed(&mut direct_cq, 22, qp_number)?;
    let received = lb.wait(true)?;
    success(&received)?;
    if (received.wr_id(), received.byte_len()) != (22, 16) || lb.remote.read(0, 16) != inline {
        return Err(format!(
            "the SRQ's receive {} got {} bytes, or other bytes than sent inline",
            received.wr_id(),
            received.byte_len()
        ));
    }
    Ok(format!(
        "QP {qp_number:#x}: {LEN} bytes written, 16 bytes sent inline, both completions polled directly"
    ))
}

/// Waits for the direct CQ's next completion: `wr_id`'s, successful, of QP `qp_number`.
fn completed(direct_cq: &mut DirectCompletionQueue, wr_id: u64, qp_number: u32) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    let mut completions = [Completion::default(); 1];
    loop {
        let polled = direct_cq
            .poll(&mut completions)
            .map_err(|e| format!("poll the direct CQ: {}", chain(&e)))?;
        if polled == 1 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!("no direct completion within {TIMEOUT:?}"));
        }
        std::thread::yield_now();
    }
    let completion = completions[0];
    match (completion.wr_id(), completion.status(), completion.qp_number()) {
        (id, WorkCompletionStatus::Success, qp) if (id, qp) == (wr_id, qp_number) => Ok(()),
        (id, status, qp) => Err(format!(
            "direct completion {id} of QP {qp:#x}: {status:?}, vendor syndrome {:#x} (expected {wr_id}, success)",
            completion.vendor_err()
        )),
    }
}

#[cfg(test)]
mod tests {
    use sideway_ext_dc_direct::{CreateDirectDcInitiatorErrorKind, DirectRegister};

    use super::{register_line, skip_reason, Mlx5ContextFlags};

    /// A refusal that says the direct path cannot run here is a skip with its reason; any other
    /// is a failure. A shared BlueFlame register is a skip only where no thread domain could be
    /// had: on a thread domain of its own, the safe constructor never refuses it.
    #[test]
    fn only_a_cpu_wqe_signatures_or_no_thread_domain_skip_the_direct_step() {
        let arch = CreateDirectDcInitiatorErrorKind::UnsupportedArchitecture {
            architecture: "aarch64",
        };
        assert!(skip_reason(&arch, None).is_some_and(|why| why.contains("aarch64") && why.contains("x86-64 only")));
        assert!(skip_reason(&CreateDirectDcInitiatorErrorKind::WqeSignatures, None)
            .is_some_and(|why| why.contains("MLX5_QP_SIGNATURE")));
        let shared = CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned { blueflame_size: 256 };
        assert!(skip_reason(&shared, Some("ENOSPC")).is_some_and(|why| why.contains("ENOSPC") && why.contains("256")));
        assert!(skip_reason(&shared, None).is_none());
        for failure in [
            CreateDirectDcInitiatorErrorKind::DifferentCompletionQueue,
            CreateDirectDcInitiatorErrorKind::AlreadyPosted { posting_index: 2 },
            CreateDirectDcInitiatorErrorKind::BlueFlameRegisterShared { register: 0x1000 },
        ] {
            assert!(skip_reason(&failure, Some("ENOSPC")).is_none(), "{failure:?}");
        }
    }

    /// The line names the register, its size, and whether BlueFlame exists.
    #[test]
    fn the_register_line_names_the_register_and_whether_blueflame_exists() {
        let line = register_line(
            DirectRegister::ThreadDomain { blueflame_size: 256 },
            Some(Mlx5ContextFlags::none()),
        );
        assert_eq!(
            line,
            "register: its thread domain's BlueFlame register, 256 bytes a half; BlueFlame: yes"
        );
        let line = register_line(
            DirectRegister::ThreadDomain { blueflame_size: 0 },
            Some(Mlx5ContextFlags::none()),
        );
        assert_eq!(line, "register: its thread domain's doorbell register; BlueFlame: no");
        let line = register_line(DirectRegister::Doorbell, Some(Mlx5ContextFlags::BlueFlame));
        assert_eq!(line, "register: a doorbell register, no thread domain; BlueFlame: yes");
        assert!(register_line(DirectRegister::Doorbell, None).ends_with(
            "BlueFlame: unknown (no thread domain's register says, and libmlx5 before rdma-core 58 does not report it)"
        ));
    }
}
