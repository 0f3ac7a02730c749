/* What libmlx5's qp.c, cq.c and srq.c link to beyond themselves: its buffer allocation (anonymous
 * memory, as MLX5_ALLOC_TYPE_ANON gives) and the lookups and entries the post and poll paths
 * reach. */
#include "softmlx5.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void *soft_zalloc_aligned(size_t size)
{
	void *memory = NULL;

	if (posix_memalign(&memory, 4096, size ? size : 64))
		return NULL;
	memset(memory, 0, size ? size : 64);
	return memory;
}

/* buf.c: mlx5_alloc_prefered_buf with MLX5_ALLOC_TYPE_ANON */
int mlx5_alloc_prefered_buf(struct mlx5_context *mctx, struct mlx5_buf *buf, size_t size,
			    int page_size, enum mlx5_alloc_type alloc_type, const char *component)
{
	(void)mctx, (void)page_size, (void)alloc_type, (void)component;
	buf->buf = soft_zalloc_aligned(size);
	if (!buf->buf) {
		errno = ENOMEM;
		return -1;
	}
	buf->length = size;
	buf->type = MLX5_ALLOC_TYPE_ANON;
	return 0;
}

int mlx5_free_actual_buf(struct mlx5_context *ctx, struct mlx5_buf *buf)
{
	(void)ctx;
	free(buf->buf);
	buf->buf = NULL;
	return 0;
}

void mlx5_get_alloc_type(struct mlx5_context *context, struct ibv_pd *pd, const char *component,
			 enum mlx5_alloc_type *alloc_type, enum mlx5_alloc_type default_type)
{
	(void)context, (void)pd, (void)component, (void)default_type;
	*alloc_type = MLX5_ALLOC_TYPE_ANON;
}


/* mlx5.c: the uidx table cq.c's mlx5_find_uidx reads is the context's; the QP table for CQE
 * version 0 is not used (the device grants version 1). */

struct mlx5_mkey *mlx5_find_mkey(struct mlx5_context *ctx, uint32_t mkey)
{
	(void)ctx, (void)mkey;
	return NULL;
}

int mlx5_get_cmd_status_err(int err, void *out)
{
	(void)out;
	return err;
}

int mlx5dv_devx_qp_query(struct ibv_qp *qp, const void *in, size_t inlen, void *out,
			 size_t outlen)
{
	(void)qp, (void)in, (void)inlen, (void)out, (void)outlen;
	return EOPNOTSUPP;
}


SOFT_EXPORT int mlx5dv_get_clock_info(struct ibv_context *context,
				      struct mlx5dv_clock_info *clock_info)
{
	(void)context, (void)clock_info;
	return EOPNOTSUPP;
}

/* mlx5.c: MLX5_FREEZE_ON_ERROR_CQE unset */
int mlx5_freeze_on_error_cqe;

/* mlx5.c: mlx5_store_uidx — the lowest free user index of the context, its resource stored
 * where cq.c's mlx5_find_uidx reads it; -1 when the table is full. */
int soft_store_uidx(struct mlx5_context *ctx, void *rsc)
{
	int tind, i;

	pthread_mutex_lock(&ctx->uidx_table_mutex);
	for (tind = 0; tind < MLX5_UIDX_TABLE_SIZE; tind++) {
		if (!ctx->uidx_table[tind].refcnt) {
			ctx->uidx_table[tind].table =
				calloc(MLX5_UIDX_TABLE_MASK + 1, sizeof(struct mlx5_resource *));
			if (!ctx->uidx_table[tind].table)
				break;
		}
		for (i = tind ? 0 : 1; i <= MLX5_UIDX_TABLE_MASK; i++) {
			if (!ctx->uidx_table[tind].table[i]) {
				ctx->uidx_table[tind].table[i] = rsc;
				ctx->uidx_table[tind].refcnt++;
				pthread_mutex_unlock(&ctx->uidx_table_mutex);
				return (tind << MLX5_UIDX_TABLE_SHIFT) | i;
			}
		}
	}
	pthread_mutex_unlock(&ctx->uidx_table_mutex);
	return -1;
}

void soft_clear_uidx(struct mlx5_context *ctx, uint32_t uidx)
{
	int tind = (int)(uidx >> MLX5_UIDX_TABLE_SHIFT);

	pthread_mutex_lock(&ctx->uidx_table_mutex);
	if (ctx->uidx_table[tind].refcnt && ctx->uidx_table[tind].table[uidx & MLX5_UIDX_TABLE_MASK]) {
		ctx->uidx_table[tind].table[uidx & MLX5_UIDX_TABLE_MASK] = NULL;
		/* the table stays allocated: a poll racing the destroy reads NULL, not freed memory */
	}
	pthread_mutex_unlock(&ctx->uidx_table_mutex);
}
