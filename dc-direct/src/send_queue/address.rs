//! [`AddressVector`]: the route of a DC request, as an address handle holds it for libmlx5.

/// The 48-byte mlx5 address vector of an address handle (`struct mlx5_wqe_av` in
/// `mlx5dv.h`): what `mlx5dv_init_obj` with `MLX5DV_OBJ_AH` gives (`struct mlx5dv_ah`'s `av`),
/// and what libmlx5's `mlx5_send_wr_set_dc_addr` copies into each DC request.
///
/// The writer copies it as it is, then ORs the target's DCT number (with bit 31, libmlx5's
/// `MLX5_EXTENDED_UD_AV`) into its `dqp_dct` word and overwrites its first 8 bytes with the DC
/// key, as libmlx5 does; so the handle's own `dqp_dct` bits, if any, reach the wire too.
///
/// ```
/// use sideway_ext_dc_direct::send_queue::AddressVector;
///
/// let av = AddressVector::new([0; 48]);
/// assert_eq!(av.bytes(), &[0; 48]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(16))]
pub struct AddressVector([u8; 48]);

impl AddressVector {
    /// The address vector of these 48 bytes, as `struct mlx5_wqe_av` lays them out
    /// (big-endian fields).
    #[inline]
    pub const fn new(bytes: [u8; 48]) -> Self {
        Self(bytes)
    }

    /// Its 48 bytes.
    #[inline]
    pub const fn bytes(&self) -> &[u8; 48] {
        &self.0
    }
}
