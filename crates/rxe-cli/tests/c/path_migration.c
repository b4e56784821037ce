/* Path migration through rxe's libibverbs.so.1 from a C program compiled
 * against rdma-core's own verbs.h: one device on two addresses (run under
 * `rxe exec --ip ADDR1+ADDR2`), two RC QPs of it connected to each other
 * over GID 0, the alternate path over GID 1 loaded with IBV_QP_ALT_PATH
 * and IBV_MIG_REARM. The first WRITE arms both QPs; QP a migrates on
 * request (IBV_MIG_MIGRATED); the second WRITE goes by the alternate path
 * and moves QP b, which raises IBV_EVENT_PATH_MIG. Also the errnos of the
 * path_mig_state rules. Prints OK at the end. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "rc_loop.h"

/* RTS->RTS with an alternate path to gid over sgid_index, and state. */
static int load_alt(struct ibv_qp *qp, union ibv_gid *gid, int sgid_index, int is_global,
		    enum ibv_mig_state state)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.alt_ah_attr.is_global = is_global;
	a.alt_ah_attr.grh.dgid = *gid;
	a.alt_ah_attr.grh.sgid_index = sgid_index;
	a.alt_ah_attr.grh.hop_limit = 1;
	a.alt_ah_attr.port_num = 1;
	a.alt_port_num = 1;
	a.alt_pkey_index = 0;
	a.alt_timeout = 15;
	a.path_mig_state = state;
	return ibv_modify_qp(qp, &a, IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE);
}

static int set_mig(struct ibv_qp *qp, enum ibv_mig_state state)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.path_mig_state = state;
	return ibv_modify_qp(qp, &a, IBV_QP_PATH_MIG_STATE);
}

static struct ibv_qp_attr query(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	memset(&a, 0xee, sizeof a);
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
			   IBV_QP_TIMEOUT, &ia) == 0, "query_qp");
	return a;
}

/* QP a writes 64 bytes of src to addr; returns the completion status. */
static int write64(struct ibv_qp *qa, struct ibv_mr *src, uint64_t addr, uint32_t rkey, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = 64, .lkey = src->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qa, &wr, &bad))
		return -2;
	struct ibv_wc wc = wait_wc();
	CHECK(wc.wr_id == id, "write %llu: wr_id %llu", (unsigned long long)id,
	      (unsigned long long)wc.wr_id);
	return wc.status;
}

int main(void)
{
	struct ibv_context *ctx = open_only_device();
	if (!ctx)
		return 1;
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.device_cap_flags & IBV_DEVICE_AUTO_PATH_MIG, "no AUTO_PATH_MIG cap");
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	CHECK(pa.port_cap_flags & IBV_PORT_AUTO_MIGR_SUP, "no AUTO_MIGR_SUP port cap");
	union ibv_gid g0, g1;
	CHECK(ibv_query_gid(ctx, 1, 0, &g0) == 0, "gid 0");
	CHECK(ibv_query_gid(ctx, 1, 1, &g1) == 0, "gid 1 (run with --ip ADDR1+ADDR2)");
	CHECK(memcmp(&g0, &g1, sizeof g0) != 0, "two different GIDs");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		return 1;
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qa = ibv_create_qp(pd, &ia), *qb = ibv_create_qp(pd, &ia);
	if (!qa || !qb)
		return 1;
	CHECK(connect_qp(qa, qb->qp_num, &g0, IBV_ACCESS_REMOTE_WRITE) == 0, "connect a");
	CHECK(connect_qp(qb, qa->qp_num, &g0, IBV_ACCESS_REMOTE_WRITE) == 0, "connect b");
	char *buf = calloc(1, 4096), *sbuf = malloc(64);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *src = ibv_reg_mr(pd, sbuf, 64, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !src)
		return 1;
	uint64_t base = (uintptr_t)buf;

	/* A new QP is MIGRATED with no alternate path. */
	struct ibv_qp_attr a = query(qa);
	CHECK(a.path_mig_state == IBV_MIG_MIGRATED, "new QP: mig state %d", a.path_mig_state);
	/* The rules: arming needs an alternate path; the alternate path must
	 * be global (RoCE) and leave from a GID the port has. */
	errno = 0;
	CHECK(set_mig(qa, IBV_MIG_ARMED) == EINVAL, "ARMED without an alternate path");
	CHECK(set_mig(qa, IBV_MIG_REARM) == EINVAL, "REARM without an alternate path");
	CHECK(load_alt(qa, &g1, 7, 1, IBV_MIG_REARM) == EINVAL, "alternate sgid_index 7");
	CHECK(load_alt(qa, &g1, 1, 0, IBV_MIG_REARM) == EINVAL, "alternate path without GRH");
	a.path_mig_state = 3;
	CHECK(ibv_modify_qp(qa, &a, IBV_QP_PATH_MIG_STATE) == EINVAL, "path_mig_state 3");

	/* Load and rearm both. */
	CHECK(load_alt(qa, &g1, 1, 1, IBV_MIG_REARM) == 0, "load a");
	CHECK(load_alt(qb, &g1, 1, 1, IBV_MIG_REARM) == 0, "load b");
	a = query(qa);
	CHECK(a.path_mig_state == IBV_MIG_REARM, "a: mig state %d", a.path_mig_state);
	CHECK(memcmp(&a.alt_ah_attr.grh.dgid, &g1, sizeof g1) == 0, "a: alternate dgid");
	CHECK(a.alt_ah_attr.grh.sgid_index == 1 && a.alt_timeout == 15 && a.alt_port_num == 1,
	      "a: alternate sgid_index %d timeout %d port %d", a.alt_ah_attr.grh.sgid_index,
	      a.alt_timeout, a.alt_port_num);
	CHECK(set_mig(qa, IBV_MIG_MIGRATED) == EINVAL, "MIGRATED from REARM");

	/* WRITE 1 on the primary path: MigReq 0 both ways arms both. */
	memset(sbuf, 0x11, 64);
	CHECK(write64(qa, src, base, mr->rkey, 1) == IBV_WC_SUCCESS, "write 1");
	CHECK(query(qa).path_mig_state == IBV_MIG_ARMED, "a armed");
	CHECK(query(qb).path_mig_state == IBV_MIG_ARMED, "b armed");
	CHECK(set_mig(qa, IBV_MIG_REARM) == EINVAL, "REARM while ARMED");

	/* Migration on request: a moves now; WRITE 2 goes by GID 1. */
	CHECK(set_mig(qa, IBV_MIG_MIGRATED) == 0, "migrate a");
	a = query(qa);
	CHECK(a.path_mig_state == IBV_MIG_MIGRATED, "a migrated: %d", a.path_mig_state);
	CHECK(memcmp(&a.ah_attr.grh.dgid, &g1, sizeof g1) == 0 && a.ah_attr.grh.sgid_index == 1,
	      "a: the primary path is the old alternate");
	CHECK(a.timeout == 15, "a: the alternate timeout, %d", a.timeout);
	memset(sbuf, 0x22, 64);
	CHECK(write64(qa, src, base + 64, mr->rkey, 2) == IBV_WC_SUCCESS, "write 2");
	CHECK(buf[0] == 0x11 && buf[63] == 0x11 && buf[64] == 0x22 && buf[127] == 0x22,
	      "the WRITEs landed");

	/* b followed, and said so. */
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 5000) == 1, "no async event within 5 s");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0, "get_async_event");
	CHECK(ev.event_type == IBV_EVENT_PATH_MIG && ev.element.qp == qb,
	      "event %d (%s) for %p, want PATH_MIG for b", ev.event_type,
	      ibv_event_type_str(ev.event_type), (void *)ev.element.qp);
	ibv_ack_async_event(&ev);
	a = query(qb);
	CHECK(a.path_mig_state == IBV_MIG_MIGRATED, "b migrated: %d", a.path_mig_state);
	CHECK(memcmp(&a.ah_attr.grh.dgid, &g1, sizeof g1) == 0, "b: on the alternate path");

	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "destroy qps");
	ibv_dereg_mr(mr);
	ibv_dereg_mr(src);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	if (failures)
		return 1;
	printf("OK\n");
	return 0;
}
