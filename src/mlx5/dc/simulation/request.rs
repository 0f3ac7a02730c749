//! A request of the simulated fabric: what its builders (`ibv_wr_*`, `mlx5dv_wr_set_dc_addr`)
//! made of it, how long it takes, and what it does at its DC target: the statuses it ends with
//! and the bytes it moves.
use rdma_mummy_sys::{ibv_wc_opcode, ibv_wc_status};

use super::fabric::{Rng, Settings};
use super::target::{SimulatedMessage, Target, FIRST_DCT_NUMBER};
use super::WrongDcKey;

pub(crate) const SUCCESS: u32 = ibv_wc_status::IBV_WC_SUCCESS;
pub(crate) const FLUSH: u32 = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
pub(crate) const REM_INV_REQ: u32 = ibv_wc_status::IBV_WC_REM_INV_REQ_ERR;
pub(crate) const REM_ACCESS: u32 = ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
pub(crate) const RETRY_EXC: u32 = ibv_wc_status::IBV_WC_RETRY_EXC_ERR;
pub(crate) const RNR_RETRY_EXC: u32 = ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR;

/// `rnr_retry` 7: retry for ever (ibv_modify_qp(3): "7 means infinite").
pub(crate) const RNR_RETRY_INFINITE: u8 = 7;

/// A request's operation, as its builder (`ibv_wr_*`) gave it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Operation {
    Send {
        imm: Option<u32>,
    },
    Write {
        rkey: u32,
        remote_addr: u64,
        imm: Option<u32>,
    },
    Read {
        rkey: u32,
        remote_addr: u64,
    },
}

impl Operation {
    pub(crate) fn opcode(self) -> u32 {
        match self {
            Self::Send { .. } => ibv_wc_opcode::IBV_WC_SEND,
            Self::Write { .. } => ibv_wc_opcode::IBV_WC_RDMA_WRITE,
            Self::Read { .. } => ibv_wc_opcode::IBV_WC_RDMA_READ,
        }
    }
}

/// A request's local data: copied at the setter (inline), or read (written, for a READ) where
/// the scatter/gather list points when the request executes, as the device's DMA does.
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Inline(Vec<u8>),
    Gather(Vec<(u64, u32)>),
}

/// One request in an initiator's send queue.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) wr_id: u64,
    pub(crate) operation: Operation,
    pub(crate) dct_number: u32,
    pub(crate) dc_key: u64,
    pub(crate) stream: Option<u16>,
    pub(crate) payload: Payload,
    /// The tick it was posted at.
    pub(crate) posted_at: u64,
}

/// A test request's number: the first 8 bytes of its inline data (little-endian).
#[cfg(test)]
pub(crate) fn number(payload: &Payload) -> u64 {
    match payload {
        Payload::Inline(bytes) if bytes.len() >= 8 => u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")),
        _ => u64::MAX,
    }
}

/// How a request ended at its target, or that it must wait.
pub(crate) enum Outcome {
    /// A status and, for a READ, the bytes read.
    Ended(u32, u32),
    /// A receiver-not-ready NAK: tried again after the RNR timer.
    ReceiverNotReady,
}

/// How long a request takes from the moment it is the head of its queue: its target's latency,
/// or the transport timeout for a target that does not answer (not there, or dropping a wrong DC
/// key).
pub(crate) fn cost(targets: &[Target], settings: &Settings, request: &Request) -> u64 {
    let target = request
        .dct_number
        .checked_sub(FIRST_DCT_NUMBER)
        .and_then(|index| targets.get(index as usize));
    match target {
        Some(target) if target.alive && !drops_key(settings, target, request) => target.latency.max(1),
        _ => settings.transport_timeout.max(1),
    }
}

/// Whether `target` drops `request` for its DC key.
fn drops_key(settings: &Settings, target: &Target, request: &Request) -> bool {
    request.dc_key != target.dc_key && settings.wrong_key == WrongDcKey::Dropped
}

/// What a request does at its target. The statuses are ibv_poll_cq(3)'s:
/// - no DC target behind the DCT number (killed, or never there): nothing answers, so the
///   transport retries run out, `IBV_WC_RETRY_EXC_ERR` ("the remote side didn't send any Ack or
///   Nack"; what ConnectX reports for a destroyed DCT: openucx/ucx#3679, syndrome 0x15);
/// - a DC key other than the target's: dropped, so `IBV_WC_RETRY_EXC_ERR` as for a target that
///   is not there (mlx5 raises `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION` at the target instead of a
///   NAK), or, as the fabric is set, `IBV_WC_REM_ACCESS_ERR` ([`WrongDcKey`]);
/// - a WRITE/READ outside its memory or with another rkey: `IBV_WC_REM_ACCESS_ERR` ("a
///   protection error occurred on a remote data buffer");
/// - a SEND longer than a receive slot: `IBV_WC_REM_INV_REQ_ERR` (the responder cannot take
///   the message), the slot consumed;
/// - a SEND (or WRITE with immediate) with no receive posted: a receiver-not-ready NAK, tried
///   again after the RNR timer, `IBV_WC_RNR_RETRY_EXC_ERR` once `rnr_retry` NAKs were met
///   (7: never; ibv_modify_qp(3)).
pub(crate) fn execute(
    targets: &mut [Target], settings: &Settings, rng: &mut Rng, request: &Request, rnr_attempts: u32,
) -> Outcome {
    let target = request
        .dct_number
        .checked_sub(FIRST_DCT_NUMBER)
        .and_then(|index| targets.get_mut(index as usize));
    let Some(target) = target.filter(|target| target.alive) else {
        return Outcome::Ended(rng.pick(&settings.dead_statuses).unwrap_or(RETRY_EXC), 0);
    };
    if request.dc_key != target.dc_key {
        let status = match settings.wrong_key {
            WrongDcKey::Dropped => RETRY_EXC,
            WrongDcKey::RemoteAccessError => REM_ACCESS,
        };
        return Outcome::Ended(status, 0);
    }
    if settings.random_failures > 0 && rng.up_to(u64::from(settings.random_failures) - 1) == 0 {
        // A scripted transient failure: a remote access error, or one time in four a transport
        // retry exceeded.
        let status = if rng.up_to(3) == 0 { RETRY_EXC } else { REM_ACCESS };
        return Outcome::Ended(status, 0);
    }
    let needs_receive = match request.operation {
        Operation::Send { .. } | Operation::Write { imm: Some(_), .. } => true,
        Operation::Write { imm: None, .. } | Operation::Read { .. } => false,
    };
    if needs_receive && target.free_slots == 0 {
        if settings.rnr_retry != RNR_RETRY_INFINITE && rnr_attempts >= u32::from(settings.rnr_retry) {
            return Outcome::Ended(RNR_RETRY_EXC, 0);
        }
        return Outcome::ReceiverNotReady;
    }
    match request.operation {
        Operation::Send { imm } => {
            target.free_slots -= 1;
            let data = gather(&request.payload);
            if data.len() > target.slot_size as usize {
                return Outcome::Ended(REM_INV_REQ, 0);
            }
            target.received.push_back(SimulatedMessage { data, imm_data: imm });
            Outcome::Ended(SUCCESS, 0)
        },
        Operation::Write { rkey, remote_addr, imm } => {
            let length = payload_length(&request.payload);
            let Some(range) = remote_range(target, rkey, remote_addr, length) else {
                return Outcome::Ended(REM_ACCESS, 0);
            };
            let data = gather(&request.payload);
            target.memory[range].copy_from_slice(&data);
            if let Some(imm) = imm {
                target.free_slots -= 1;
                target.received.push_back(SimulatedMessage {
                    data: Vec::new(),
                    imm_data: Some(imm),
                });
            }
            Outcome::Ended(SUCCESS, 0)
        },
        Operation::Read { rkey, remote_addr } => {
            let length = payload_length(&request.payload);
            let Some(range) = remote_range(target, rkey, remote_addr, length) else {
                return Outcome::Ended(REM_ACCESS, 0);
            };
            scatter(&request.payload, &target.memory[range]);
            Outcome::Ended(SUCCESS, length as u32)
        },
    }
}

/// The bytes of `[remote_addr, +length)` in the target's memory, if `rkey` is its and the range
/// lies inside.
fn remote_range(target: &Target, rkey: u32, remote_addr: u64, length: usize) -> Option<std::ops::Range<usize>> {
    if rkey != target.rkey {
        return None;
    }
    let start = usize::try_from(remote_addr.checked_sub(target.base)?).ok()?;
    let end = start.checked_add(length)?;
    (end <= target.memory.len()).then_some(start..end)
}

fn payload_length(payload: &Payload) -> usize {
    match payload {
        Payload::Inline(bytes) => bytes.len(),
        Payload::Gather(list) => list.iter().map(|&(_, length)| length as usize).sum(),
    }
}

/// The request's bytes: its inline copy, or what its scatter/gather list points at now.
fn gather(payload: &Payload) -> Vec<u8> {
    match payload {
        Payload::Inline(bytes) => bytes.clone(),
        Payload::Gather(list) => {
            let mut bytes = Vec::with_capacity(payload_length(payload));
            for &(addr, length) in list {
                if length == 0 {
                    continue;
                }
                // SAFETY: the caller of the unsafe `setup_sge`/`setup_sge_list` promised that the
                // buffer is valid and stays so until the request completes; it has not yet (its
                // completion is made after this), and requests a reset or a destruction discards
                // are never executed.
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(addr as *const u8, length as usize) });
            }
            bytes
        },
    }
}

/// Writes `data` where a READ's scatter list points, in order.
fn scatter(payload: &Payload, mut data: &[u8]) {
    let Payload::Gather(list) = payload else {
        // Inline data cannot take a READ's reply; the guard never builds one.
        return;
    };
    for &(addr, length) in list {
        let length = (length as usize).min(data.len());
        if length == 0 {
            continue;
        }
        // SAFETY: as in `gather`: the buffer is valid, and writable by the device (the caller's
        // promise), until the request completes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, length) };
        data = &data[length..];
    }
}
