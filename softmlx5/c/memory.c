/* Protection domains, memory regions, thread domains and parent domains. */
#include "softmlx5.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static uint32_t next_pdn = 1;

int soft_dealloc_parent_domain(struct mlx5_parent_domain *pd);
/* Keys: an index in the top 24 bits and a variant byte, as mlx5_ib's mkeys (mlx5_core's
 * mlx5_idx_to_mkey and the key byte); lkey equals rkey, as mlx5 hands them out. */
static uint32_t next_key_index = 0x100;

SOFT_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct mlx5_pd *pd = calloc(1, sizeof(*pd));

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibv_pd.context = context;
	pthread_mutex_lock(&soft_lock);
	pd->pdn = next_pdn++;
	pthread_mutex_unlock(&soft_lock);
	atomic_init(&pd->refcount, 1);
	return &pd->ibv_pd;
}

SOFT_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct mlx5_parent_domain *parent = to_mparent_domain(pd);
	struct soft_mr *mr;
	struct soft_qp *qp;

	pthread_mutex_lock(&soft_lock);
	/* The kernel refuses while objects use it (ib_dealloc_pd_user's usecnt): EBUSY. */
	for (mr = soft_mrs; mr; mr = mr->next)
		if (mr->mmr.vmr.ibv_mr.pd == pd)
			goto busy;
	for (qp = soft_qps; qp; qp = qp->next)
		if (qp->mqp.verbs_qp.qp.pd == pd)
			goto busy;
	if (atomic_load(parent ? &parent->mpd.refcount : &to_mpd(pd)->refcount) > 1)
		goto busy;
	pthread_mutex_unlock(&soft_lock);
	if (parent)
		return soft_dealloc_parent_domain(parent);
	free(to_mpd(pd));
	return 0;
busy:
	pthread_mutex_unlock(&soft_lock);
	return EBUSY;
}

static struct ibv_mr *register_region(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				      int access)
{
	struct soft_mr *mr;
	uint32_t key;

	/* ib_check_mr_access: remote write or atomic needs local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	if (!length && addr == NULL) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&soft_lock);
	key = (next_key_index++ << 8) | 0x42;
	mr->mmr.vmr.ibv_mr.context = pd->context;
	mr->mmr.vmr.ibv_mr.pd = pd;
	mr->mmr.vmr.ibv_mr.addr = addr;
	mr->mmr.vmr.ibv_mr.length = length;
	mr->mmr.vmr.ibv_mr.lkey = key;
	mr->mmr.vmr.ibv_mr.rkey = key;
	mr->mmr.vmr.mr_type = IBV_MR_TYPE_MR;
	mr->mmr.vmr.access = access;
	(void)iova;
	mr->next = soft_mrs;
	soft_mrs = mr;
	pthread_mutex_unlock(&soft_lock);
	return &mr->mmr.vmr.ibv_mr;
}

SOFT_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return register_region(pd, addr, length, (uintptr_t)addr, access);
}

SOFT_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					    uint64_t iova, unsigned int access)
{
	if (iova != (uintptr_t)addr) {
		/* Regions whose I/O address differs from the virtual one are not modelled. */
		errno = EOPNOTSUPP;
		return NULL;
	}
	return register_region(pd, addr, length, iova, (int)access);
}

SOFT_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					   uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SOFT_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					     uint64_t iova, int fd, int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

SOFT_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct soft_mr **link, *mr = container_of(ibmr, struct soft_mr, mmr.vmr.ibv_mr);

	pthread_mutex_lock(&soft_lock);
	for (link = &soft_mrs; *link; link = &(*link)->next)
		if (*link == mr) {
			*link = mr->next;
			break;
		}
	pthread_mutex_unlock(&soft_lock);
	free(mr);
	return 0;
}

struct soft_mr *soft_mr_find(uint32_t key, bool remote)
{
	struct soft_mr *mr;

	for (mr = soft_mrs; mr; mr = mr->next)
		if ((remote ? mr->mmr.vmr.ibv_mr.rkey : mr->mmr.vmr.ibv_mr.lkey) == key)
			return mr;
	return NULL;
}

/* 0 when `mr` covers [addr, addr + len) for `access` on `pd` (the PD of the QP using it; a
 * parent domain checks as its protection domain), -1 otherwise. The hardware checks the key's
 * PD, its bounds and its access rights (PRM, "Memory Key" checks). */
int soft_mr_check(struct soft_mr *mr, struct ibv_pd *pd, uint64_t addr, uint64_t len,
		  unsigned access)
{
	const struct ibv_mr *ibmr;
	uint64_t start;

	if (!mr)
		return -1;
	ibmr = &mr->mmr.vmr.ibv_mr;
	/* libmlx5's to_mpd: a parent domain stands for its protection domain */
	if (to_mpd(ibmr->pd) != to_mpd(pd))
		return -1;
	start = (uintptr_t)ibmr->addr;
	if (addr < start || len > ibmr->length || addr - start > ibmr->length - len)
		return -1;
	if ((access & (unsigned)mr->mmr.vmr.access) != access)
		return -1;
	return 0;
}

/* ---- thread domains and parent domains (verbs.c: mlx5_alloc_td, mlx5_alloc_parent_domain) ---- */

/* verbs.c: mlx5_alloc_dyn_uar and mlx5_insert_dyn_uuars. A page of BlueFlame registers for
 * thread domains, each on the context's list: a dynamically allocated UAR page; on a kernel
 * without dynamic UAR one of the num_dyn_bfregs pages the context got at its creation (legacy
 * mode), ENOSPC past libmlx5's count of them, which lets one page too many through to the
 * kernel, whose uar_mmap answers EINVAL for it (its index past the context's pages). Called
 * with dyn_bfregs_mutex. */
static int add_register_page(struct mlx5_context *mctx)
{
	bool legacy = mctx->flags & MLX5_CTX_FLAGS_NO_KERN_DYN_UAR;
	int per_page = mctx->num_uars_per_page * MLX5_NUM_NON_FP_BFREGS_PER_UAR, j;
	char *page;

	if (legacy) {
		if (mctx->curr_legacy_dyn_sys_uar_page > mctx->max_num_legacy_dyn_uar_sys_page) {
			errno = ENOSPC;
			return -1;
		}
		if (mctx->curr_legacy_dyn_sys_uar_page >= mctx->num_dyn_bfregs / (uint32_t)per_page) {
			errno = EINVAL;
			return -1;
		}
	}
	page = soft_zalloc_aligned(4096);
	if (!page) {
		errno = ENOMEM;
		return -1;
	}
	for (j = 0; j < per_page; j++) {
		struct mlx5_bf *bf = calloc(1, sizeof(*bf));

		if (!bf)
			break;
		bf->uar = page;
		bf->reg = page + MLX5_BF_OFFSET + j * mctx->bf_reg_size;
		bf->buf_size = mctx->bf_reg_size / 2;
		bf->uuarn = 1;
		bf->dyn_alloc_uar = !legacy;
		if (legacy)
			bf->bfreg_dyn_index = mctx->curr_legacy_dyn_sys_uar_page * per_page + j;
		mlx5_spinlock_init(&bf->lock, 0);
		list_node_init(&bf->uar_entry);
		list_add_tail(&mctx->dyn_uar_bf_list, &bf->uar_entry);
	}
	if (legacy)
		mctx->curr_legacy_dyn_sys_uar_page++;
	return 0;
}

/* verbs.c: mlx5_alloc_td and mlx5_attach_dedicated_uar: a BlueFlame register of its own,
 * written without a lock, from the context's list, a new page when it is empty. */
struct ibv_td *soft_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	struct mlx5_context *mctx = to_mctx(context);
	struct mlx5_td *td;

	if (attr->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	td = calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&mctx->dyn_bfregs_mutex);
	td->bf = list_pop(&mctx->dyn_uar_bf_list, struct mlx5_bf, uar_entry);
	if (!td->bf && !add_register_page(mctx))
		td->bf = list_pop(&mctx->dyn_uar_bf_list, struct mlx5_bf, uar_entry);
	pthread_mutex_unlock(&mctx->dyn_bfregs_mutex);
	if (!td->bf) {
		free(td);
		return NULL;
	}
	atomic_init(&td->refcount, 1);
	td->ibv_td.context = context;
	return &td->ibv_td;
}

/* verbs.c: mlx5_dealloc_td and mlx5_detach_dedicated_uar: the register goes back on the list. */
int soft_dealloc_td(struct ibv_td *ibtd)
{
	struct mlx5_context *mctx = to_mctx(ibtd->context);
	struct mlx5_td *td = to_mtd(ibtd);

	if (atomic_load(&td->refcount) > 1)
		return EBUSY;
	pthread_mutex_lock(&mctx->dyn_bfregs_mutex);
	list_add_tail(&mctx->dyn_uar_bf_list, &td->bf->uar_entry);
	pthread_mutex_unlock(&mctx->dyn_bfregs_mutex);
	free(td);
	return 0;
}

struct ibv_pd *soft_alloc_parent_domain(struct ibv_context *context,
					struct ibv_parent_domain_init_attr *attr)
{
	struct mlx5_parent_domain *pd;

	if (attr->comp_mask & ~(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
				IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) {
		errno = EINVAL;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->mpd.ibv_pd.context = context;
	pd->mpd.mprotection_domain = to_mpd(attr->pd);
	atomic_fetch_add(&to_mpd(attr->pd)->refcount, 1);
	if (attr->td) {
		pd->mtd = to_mtd(attr->td);
		atomic_fetch_add(&pd->mtd->refcount, 1);
	}
	atomic_init(&pd->mpd.refcount, 1);
	pd->mpd.pdn = to_mpd(attr->pd)->pdn;
	return &pd->mpd.ibv_pd;
}

/* Frees a parent domain (ibv_dealloc_pd on one): the counts it took. */
int soft_dealloc_parent_domain(struct mlx5_parent_domain *pd)
{
	atomic_fetch_sub(&pd->mpd.mprotection_domain->refcount, 1);
	if (pd->mtd)
		atomic_fetch_sub(&pd->mtd->refcount, 1);
	free(pd);
	return 0;
}
