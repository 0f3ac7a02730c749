/* The oracle's stand-in for rdma-core's util/mmio.h: every MMIO store qp.c and cq.c issue is
 * recorded (oracle_store, shim.c: its address and the bytes as stored) and performed on the
 * plain memory that stands for the device's register. 64-bit stores and mmio_memcpy_x64 (as
 * eight 8-byte stores per 64 bytes, ascending, as rdma-core's x86-64 version issues them) are
 * what the mlx5 send and poll paths use; the narrower ones are stored and recorded likewise. */
#ifndef __UTIL_MMIO_H
#define __UTIL_MMIO_H

#include <linux/types.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <endian.h>

#include <config.h>
#include <util/compiler.h>

void oracle_store(void *addr, const void *bytes, size_t len);

#define ORACLE_MAKE_WRITE(_NAME_, _SZ_)                                               \
	static inline void _NAME_##_be(void *addr, __be##_SZ_ value)                  \
	{                                                                             \
		oracle_store(addr, &value, sizeof(value));                            \
	}                                                                             \
	static inline void _NAME_##_le(void *addr, __le##_SZ_ value)                  \
	{                                                                             \
		oracle_store(addr, &value, sizeof(value));                            \
	}                                                                             \
	static inline void _NAME_(void *addr, uint##_SZ_##_t value)                   \
	{                                                                             \
		__le##_SZ_ le = htole##_SZ_(value);                                   \
		oracle_store(addr, &le, sizeof(le));                                  \
	}
#define ORACLE_MAKE_READ(_NAME_, _SZ_)                                                \
	static inline __be##_SZ_ _NAME_##_be(const void *addr)                        \
	{                                                                             \
		__be##_SZ_ value;                                                     \
		memcpy(&value, addr, sizeof(value));                                  \
		return value;                                                         \
	}                                                                             \
	static inline __le##_SZ_ _NAME_##_le(const void *addr)                        \
	{                                                                             \
		__le##_SZ_ value;                                                     \
		memcpy(&value, addr, sizeof(value));                                  \
		return value;                                                         \
	}                                                                             \
	static inline uint##_SZ_##_t _NAME_(const void *addr)                         \
	{                                                                             \
		return le##_SZ_##toh(_NAME_##_le(addr));                              \
	}

ORACLE_MAKE_WRITE(mmio_write16, 16)
ORACLE_MAKE_WRITE(mmio_write32, 32)
ORACLE_MAKE_WRITE(mmio_write64, 64)
ORACLE_MAKE_READ(mmio_read16, 16)
ORACLE_MAKE_READ(mmio_read32, 32)
ORACLE_MAKE_READ(mmio_read64, 64)

static inline void mmio_write8(void *addr, uint8_t value)
{
	oracle_store(addr, &value, 1);
}

static inline uint8_t mmio_read8(const void *addr)
{
	return *(const volatile uint8_t *)addr;
}

static inline void mmio_memcpy_x64(void *dest, const void *src, size_t bytecnt)
{
	uint8_t *d = dest;
	const uint8_t *s = src;

	while (bytecnt > 0) {
		oracle_store(d, s, 8);
		d += 8;
		s += 8;
		bytecnt -= 8;
	}
}

#undef ORACLE_MAKE_WRITE
#undef ORACLE_MAKE_READ

#endif
