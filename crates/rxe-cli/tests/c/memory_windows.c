/* Memory windows through rxe's libibverbs.so.1 from a C program compiled
 * against rdma-core's own verbs.h (ibv_alloc_mw, ibv_bind_mw and
 * ibv_dealloc_mw are inline there and call the context's ops): two RC QPs
 * of one device connected to each other; QP b binds windows on a region,
 * QP a writes through their R_Keys. A type 1 window bound by ibv_bind_mw,
 * a type 2 window bound by an IBV_WR_BIND_MW work request and by
 * ibv_wr_bind_mw, invalidated by IBV_WR_LOCAL_INV and ibv_wr_local_inv;
 * IBTA 1.5 ATOMIC WRITE by IBV_WR_ATOMIC_WRITE and ibv_wr_atomic_write;
 * last the WRITE through the invalidated window, refused. Run under `rxe exec --ip ADDR`.
 * Prints OK at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "rc_loop.h"

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW |
				  IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_ATOMIC_WRITE,
	};
	return ibv_create_qp_ex(ctx, &ia);
}

/* QP a writes 16 bytes of src to addr through rkey; returns the status. */
static int write_through(struct ibv_qp *qa, struct ibv_mr *src, uint64_t addr, uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = 16, .lkey = src->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qa, &wr, &bad))
		return -2;
	struct ibv_wc wc = wait_wc();
	CHECK(wc.wr_id == id && wc.opcode == IBV_WC_RDMA_WRITE, "write %llu: wr_id %llu opcode %d",
	      (unsigned long long)id, (unsigned long long)wc.wr_id, wc.opcode);
	return wc.status;
}

int main(void)
{
	struct ibv_context *ctx = open_only_device();
	if (!ctx)
		return 1;
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.max_mw > 0, "max_mw %d", da.max_mw);
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "no MEM_WINDOW cap");
	CHECK(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "no MEM_WINDOW_TYPE_2B cap");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		return 1;
	struct ibv_qp *qa = make_qp(ctx, pd), *qb = make_qp(ctx, pd);
	if (!qa || !qb) {
		fprintf(stderr, "create_qp_ex: %d\n", errno);
		return 1;
	}
	CHECK(connect_qp(qa, qb->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) == 0, "connect a");
	CHECK(connect_qp(qb, qa->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) == 0, "connect b");

	char *buf = calloc(1, 4096), *sbuf = malloc(64);
	memset(sbuf, 0x5a, 64);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mr *src = ibv_reg_mr(pd, sbuf, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *plain = ibv_reg_mr(pd, sbuf, 64, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !src || !plain)
		return 1;
	uint64_t base = (uintptr_t)buf;

	/* Type 1: ibv_bind_mw, then a WRITE through it. */
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == pd, "alloc type 1: %d", errno);
	if (!mw1)
		return 1;
	uint32_t old = mw1->rkey;
	struct ibv_mw_bind b = { .wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = base + 64, .length = 128,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	CHECK(ibv_bind_mw(qb, mw1, &b) == 0, "bind_mw");
	CHECK(mw1->rkey == ibv_inc_rkey(old), "new rkey %#x after %#x", mw1->rkey, old);
	struct ibv_wc wc = wait_wc();
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "bind wc: %llu %d %d", (unsigned long long)wc.wr_id, wc.status, wc.opcode);
	CHECK(write_through(qa, src, base + 64, mw1->rkey, 2) == IBV_WC_SUCCESS, "write type 1");
	CHECK(buf[64] == 0x5a && buf[79] == 0x5a && buf[80] == 0, "type 1 bytes");
	/* The region cannot go while a window is bound to it. */
	CHECK(ibv_dereg_mr(mr) == EBUSY, "dereg while bound");

	/* Type 2: IBV_WR_BIND_MW, a WRITE, IBV_WR_LOCAL_INV. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2 && mw2->type == IBV_MW_TYPE_2, "alloc type 2: %d", errno);
	if (!mw2)
		return 1;
	uint32_t k2 = ibv_inc_rkey(mw2->rkey);
	struct ibv_send_wr wr = { .wr_id = 3, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = k2;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = mr, .addr = base + 1024, .length = 256,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	CHECK(ibv_post_send(qb, &wr, &bad) == 0, "post BIND_MW");
	wc = wait_wc();
	CHECK(wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "bind wr wc: %d %d", wc.status, wc.opcode);
	CHECK(write_through(qa, src, base + 1024, k2, 4) == IBV_WC_SUCCESS, "write type 2");
	CHECK(buf[1024] == 0x5a, "type 2 bytes");
	struct ibv_send_wr inv = { .wr_id = 5, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED };
	inv.invalidate_rkey = k2;
	CHECK(ibv_post_send(qb, &inv, &bad) == 0, "post LOCAL_INV");
	wc = wait_wc();
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
	      "local inv wc: %d %d", wc.status, wc.opcode);

	/* Again through the extended QP calls, with another key portion. */
	struct ibv_qp_ex *qbx = ibv_qp_to_qp_ex(qb);
	CHECK(qbx, "qp_ex");
	uint32_t k3 = ibv_inc_rkey(k2);
	struct ibv_mw_bind_info info = { .mr = mr, .addr = base + 2048, .length = 64,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	ibv_wr_start(qbx);
	qbx->wr_id = 6;
	qbx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qbx, mw2, k3, &info);
	CHECK(ibv_wr_complete(qbx) == 0, "wr_bind_mw");
	wc = wait_wc();
	CHECK(wc.wr_id == 6 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "wr_bind_mw wc: %d %d", wc.status, wc.opcode);
	CHECK(write_through(qa, src, base + 2048, k3, 7) == IBV_WC_SUCCESS, "write type 2 again");
	ibv_wr_start(qbx);
	qbx->wr_id = 8;
	ibv_wr_local_inv(qbx, k3);
	CHECK(ibv_wr_complete(qbx) == 0, "wr_local_inv");
	wc = wait_wc();
	CHECK(wc.wr_id == 8 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
	      "wr_local_inv wc: %d %d", wc.status, wc.opcode);

	/* IBTA 1.5 ATOMIC WRITE, by ibv_post_send and by ibv_wr_atomic_write. */
	uint64_t *words = calloc(4, sizeof(uint64_t));
	struct ibv_mr *aw = ibv_reg_mr(pd, words, 32, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!aw)
		return 1;
	uint64_t v1 = 0x1122334455667788ULL, v2 = 0x99aabbccddeeff00ULL;
	memcpy(sbuf, &v1, 8);
	struct ibv_sge asge = { .addr = (uintptr_t)sbuf, .length = 8, .lkey = src->lkey };
	struct ibv_send_wr awr = { .wr_id = 10, .sg_list = &asge, .num_sge = 1,
		.opcode = IBV_WR_ATOMIC_WRITE, .send_flags = IBV_SEND_SIGNALED };
	awr.wr.rdma.remote_addr = (uintptr_t)&words[1];
	awr.wr.rdma.rkey = aw->rkey;
	CHECK(ibv_post_send(qa, &awr, &bad) == 0, "post ATOMIC_WRITE");
	wc = wait_wc();
	CHECK(wc.wr_id == 10 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE,
	      "atomic write wc: %d %d", wc.status, wc.opcode);
	CHECK(words[1] == v1, "atomic write: %llx", (unsigned long long)words[1]);
	struct ibv_qp_ex *qax = ibv_qp_to_qp_ex(qa);
	ibv_wr_start(qax);
	qax->wr_id = 11;
	qax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qax, aw->rkey, (uintptr_t)&words[2], &v2);
	CHECK(ibv_wr_complete(qax) == 0, "wr_atomic_write");
	wc = wait_wc();
	CHECK(wc.wr_id == 11 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE,
	      "wr_atomic_write wc: %d %d", wc.status, wc.opcode);
	CHECK(words[2] == v2 && words[0] == 0 && words[3] == 0, "wr_atomic_write: %llx",
	      (unsigned long long)words[2]);
	CHECK(ibv_dereg_mr(aw) == 0, "dereg aw");

	/* The same WRITE once the window is invalidated: refused. */
	memset(buf + 2048, 0, 64);
	CHECK(write_through(qa, src, base + 2048, k3, 9) == IBV_WC_REM_ACCESS_ERR, "write after invalidation");
	CHECK(buf[2048] == 0, "nothing landed");

	CHECK(ibv_dealloc_mw(mw1) == 0, "dealloc 1");
	CHECK(ibv_dealloc_mw(mw2) == 0, "dealloc 2");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg after dealloc");
	if (failures)
		return 1;
	printf("OK\n");
	return 0;
}
