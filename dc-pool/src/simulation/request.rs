//! A request of the simulated fabric: what its builders (`ibv_wr_*`, `mlx5dv_wr_set_dc_addr`)
//! made of it, how long it takes, and what it does at its DC target: the statuses it ends with
//! and the bytes it moves.
use rdma_mummy_sys::{ibv_wc_opcode, ibv_wc_status};
use sideway::ibverbs::AccessFlags;

use super::memory::Memory;
use super::settings::{Rng, Settings};
use super::target::{SimulatedMessage, Target, FIRST_DCT_NUMBER};
use super::WrongDcKey;

pub(crate) const SUCCESS: u32 = ibv_wc_status::IBV_WC_SUCCESS;
pub(crate) const LOC_LEN: u32 = ibv_wc_status::IBV_WC_LOC_LEN_ERR;
pub(crate) const LOC_PROT: u32 = ibv_wc_status::IBV_WC_LOC_PROT_ERR;
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
    Gather(Vec<Sge>),
}

/// A scatter/gather entry: a buffer of the program's memory and the lkey of its region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sge {
    pub(crate) address: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
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
    /// Whether it completes on success too (`IBV_SEND_SIGNALED`); an error completes always.
    pub(crate) signaled: bool,
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
/// - a SEND longer than a receive slot: `IBV_WC_REM_INV_REQ_ERR` (the responder cannot take
///   the message), the slot consumed;
/// - a SEND (or WRITE with immediate) with no receive posted: a receiver-not-ready NAK, tried
///   again after the RNR timer, `IBV_WC_RNR_RETRY_EXC_ERR` once `rnr_retry` NAKs were met
///   (7: never; ibv_modify_qp(3));
/// - at the initiator, before anything leaves it: a message longer than the port's
///   `max_msg_sz`, `IBV_WC_LOC_LEN_ERR`; a scatter/gather entry whose lkey is no region of the
///   program's, or that leaves its region, `IBV_WC_LOC_PROT_ERR` ("the data segment does not
///   reference a memory region valid for the requested operation"); a READ's entries are
///   checked when its reply lands, and need local write access too;
/// - at the target: a WRITE or READ whose rkey is no region of the target's, that leaves it, or
///   whose region lacks remote write (read) access, `IBV_WC_REM_ACCESS_ERR` ("a protection
///   error occurred on a remote data buffer").
pub(crate) fn execute(
    targets: &mut [Target], memory: &Memory, settings: &Settings, rng: &mut Rng, request: &Request, rnr_attempts: u32,
) -> Outcome {
    if payload_length(&request.payload) as u64 > settings.max_message_size {
        return Outcome::Ended(LOC_LEN, 0);
    }
    let reads = matches!(request.operation, Operation::Read { .. });
    if !reads && !local_access(memory, &request.payload, false) {
        return Outcome::Ended(LOC_PROT, 0);
    }
    let index = request.dct_number.checked_sub(FIRST_DCT_NUMBER);
    let target = request
        .dct_number
        .checked_sub(FIRST_DCT_NUMBER)
        .and_then(|index| targets.get_mut(index as usize));
    let index = index.map_or(usize::MAX, |index| index as usize);
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
            let reach = (memory, index, rkey, AccessFlags::RemoteWrite);
            let Some(range) = remote_range(target, reach, remote_addr, length) else {
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
            let reach = (memory, index, rkey, AccessFlags::RemoteRead);
            let Some(range) = remote_range(target, reach, remote_addr, length) else {
                return Outcome::Ended(REM_ACCESS, 0);
            };
            if !local_access(memory, &request.payload, true) {
                return Outcome::Ended(LOC_PROT, 0);
            }
            scatter(&request.payload, &target.memory[range]);
            Outcome::Ended(SUCCESS, length as u32)
        },
    }
}

/// Whether every scatter/gather entry (none for inline data, whose lkey is not checked:
/// ibv_post_send(3), `IBV_SEND_INLINE`) lies in a region of the program's, writable when
/// `write`. Zero-length entries are skipped (libmlx5's `_mlx5_send_wr_set_sge` builds no data
/// segment for them).
fn local_access(memory: &Memory, payload: &Payload, write: bool) -> bool {
    match payload {
        Payload::Inline(_) => true,
        Payload::Gather(list) => list
            .iter()
            .all(|sge| sge.length == 0 || memory.local_access(sge.lkey, sge.address, sge.length, write)),
    }
}

/// The bytes of `[remote_addr, +length)` in the target's memory, if `rkey` is one of its regions
/// (registered with `access`) and the range lies inside it.
fn remote_range(
    target: &Target, (memory, index, rkey, access): (&Memory, usize, u32, AccessFlags), remote_addr: u64, length: usize,
) -> Option<std::ops::Range<usize>> {
    if !memory.remote_access(index, rkey, remote_addr, length as u64, access) {
        return None;
    }
    let start = usize::try_from(remote_addr.checked_sub(target.base)?).ok()?;
    let end = start.checked_add(length)?;
    (end <= target.memory.len()).then_some(start..end)
}

fn payload_length(payload: &Payload) -> usize {
    match payload {
        Payload::Inline(bytes) => bytes.len(),
        Payload::Gather(list) => list.iter().map(|sge| sge.length as usize).sum(),
    }
}

/// The request's bytes: its inline copy, or what its scatter/gather list points at now.
fn gather(payload: &Payload) -> Vec<u8> {
    match payload {
        Payload::Inline(bytes) => bytes.clone(),
        Payload::Gather(list) => {
            let mut bytes = Vec::with_capacity(payload_length(payload));
            for &Sge { address, length, .. } in list {
                if length == 0 {
                    continue;
                }
                // SAFETY: the caller of the unsafe `setup_sge`/`setup_sge_list` promised that the
                // buffer is valid and stays so until the request completes; it has not yet (its
                // completion is made after this), and requests a reset or a destruction discards
                // are never executed.
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(address as *const u8, length as usize) });
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
    for &Sge { address, length, .. } in list {
        let length = (length as usize).min(data.len());
        if length == 0 {
            continue;
        }
        // SAFETY: as in `gather`: the buffer is valid, and writable by the device (the caller's
        // promise), until the request completes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), address as *mut u8, length) };
        data = &data[length..];
    }
}
