/* Bad input to rxe's libibverbs.so.1 from a C program compiled against
 * rdma-core's own verbs.h: every call must fail the way rdma-core fails
 * (errno values, -1 or NULL, *bad_wr at the refused request), and nothing
 * may crash. Run under `rxe exec --ip ADDR`. Prints OK at the end. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL line %d: ", __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); failures++; } } while (0)

int main(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1, "device list: %d", n);
	if (!list || n < 1)
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open: %d", errno);
	if (!ctx)
		return 1;
	ibv_free_device_list(list);

	/* Handles that are not ours. */
	void *junk = calloc(1, 512);
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "dealloc NULL");
	CHECK(ibv_destroy_cq((struct ibv_cq *)junk) == EINVAL, "destroy junk cq");
	CHECK(ibv_destroy_qp((struct ibv_qp *)junk) == EINVAL, "destroy junk qp");
	CHECK(ibv_dereg_mr((struct ibv_mr *)junk) == EINVAL, "dereg junk mr");
	errno = 0;
	CHECK(ibv_alloc_pd((struct ibv_context *)junk) == NULL && errno == EINVAL, "alloc_pd on junk");

	/* Queries. */
	union ibv_gid gid;
	memset(&gid, 0xaa, sizeof gid);
	CHECK(ibv_query_gid(ctx, 1, 5, &gid) == 0 && gid.global.interface_id == 0, "empty gid slot");
	CHECK(ibv_query_gid(ctx, 1, 99, &gid) == -1 && errno == EINVAL, "gid 99");
	CHECK(ibv_query_gid(ctx, 2, 0, &gid) == -1, "port 2");
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "port");
	CHECK(ibv_query_port(ctx, 3, &pa) == EINVAL, "port 3");
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 && dx.orig_attr.phys_port_cnt == 1, "query_device_ex");
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2, "gid_ex");
	CHECK(ibv_query_gid_ex(ctx, 1, 3, &ge, 0) == ENODATA, "gid_ex empty");
	struct ibv_gid_entry table[32];
	CHECK(ibv_query_gid_table(ctx, table, 32, 0) == 1, "gid table");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd: %d", errno);
	if (!pd)
		return 1;

	/* Memory registration rules. */
	char *buf = aligned_alloc(64, 8192);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL, "remote write without local write");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) && errno == EOPNOTSUPP, "ODP");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(mr && mr->addr == buf && mr->length == 8192, "reg_mr");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc a PD with an MR");

	/* CQs, channels. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0, "channel");
	errno = 0;
	CHECK(!ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL, "cq of 0");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	CHECK(cq && cq->cq_context == (void *)0x1234, "cq");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "channel in use");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "notify");
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "no event yet");
	struct ibv_wc wc[4];
	CHECK(ibv_poll_cq(cq, 4, wc) == 0, "empty poll");

	/* QPs: states, masks, bad work requests. */
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	errno = 0;
	struct ibv_qp_init_attr bad = ia;
	bad.qp_type = IBV_QPT_RAW_PACKET;
	CHECK(!ibv_create_qp(pd, &bad) && errno == EOPNOTSUPP, "raw packet QP");
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp && qp->state == IBV_QPS_RESET, "qp");
	if (!qp)
		return 1;
	CHECK(ia.cap.max_inline_data >= 16, "max_inline_data written back: %u", ia.cap.max_inline_data);
	CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy a CQ in use");

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad_s = NULL;
	CHECK(ibv_post_send(qp, &swr, &bad_s) == EINVAL && bad_s == &swr, "send in RESET");

	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL, "INIT without its required attributes");
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP) == EINVAL, "IBV_QP_CAP");
	qa.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL, "RESET to RTS");
	qa.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
	CHECK(qp->state == IBV_QPS_INIT, "qp->state kept current");
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr got_init;
	CHECK(ibv_query_qp(qp, &got, IBV_QP_STATE | IBV_QP_CAP, &got_init) == 0 && got.qp_state == IBV_QPS_INIT
	      && got_init.send_cq == cq && got.port_num == 1, "query_qp");

	/* A list whose second receive is bad: the first is posted, *bad_wr is the second. */
	struct ibv_recv_wr r2 = { .wr_id = 3, .sg_list = &sge, .num_sge = -1 };
	struct ibv_recv_wr r1 = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .next = &r2 }, *bad_r = NULL;
	CHECK(ibv_post_recv(qp, &r1, &bad_r) == EINVAL && bad_r == &r2, "bad second receive");
	/* A send with an unknown opcode in a list. */
	struct ibv_send_wr s2 = { .wr_id = 5, .sg_list = &sge, .num_sge = 1, .opcode = 77 };
	bad_s = NULL;
	CHECK(ibv_post_send(qp, &s2, &bad_s) == EINVAL && bad_s == &s2, "unknown opcode");

	/* Async events: the fd is non-blocking on request and empty now. */
	fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_async_event ae;
	CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN, "no async event");

	/* Extended QPs. */
	struct ibv_qp_init_attr_ex ix = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *qpx = ibv_create_qp_ex(ctx, &ix);
	CHECK(qpx && ibv_qp_to_qp_ex(qpx), "create_qp_ex");
	CHECK(ibv_qp_to_qp_ex(qp) == NULL, "a plain QP has no ibv_wr_*");
	/* TSO is a send op rxe does not have. */
	ix.send_ops_flags = IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &ix) && errno == EOPNOTSUPP, "tso send op");
	if (qpx) {
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qpx);
		ibv_wr_start(x);
		x->wr_id = 9;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(x);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 8);
		CHECK(ibv_wr_complete(x) == EINVAL, "ibv_wr_* send in RESET");
		CHECK(ibv_destroy_qp(qpx) == 0, "destroy qp ex");
	}

	/* Moving a QP to ERR flushes its posted receive (r1) into the CQ. */
	qa.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0 && qp->state == IBV_QPS_ERR, "to ERR");
	int got_flush = 0;
	for (int i = 0; i < 1000 && !got_flush; i++) {
		int k = ibv_poll_cq(cq, 4, wc);
		CHECK(k >= 0, "poll");
		got_flush = k > 0 && wc[0].wr_id == 2 && wc[0].status == IBV_WC_WR_FLUSH_ERR;
	}
	CHECK(got_flush, "flushed receive");

	/* Extended CQs: the start/next/end_poll iterator; no timestamps. */
	struct ibv_cq_init_attr_ex cx = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
	CHECK(cqx, "create_cq_ex: %d", errno);
	cx.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &cx) && errno == EOPNOTSUPP, "timestamps");
	if (cqx) {
		struct ibv_poll_cq_attr pattr = { 0 };
		CHECK(ibv_start_poll(cqx, &pattr) == ENOENT, "empty cq_ex");
		struct ibv_qp_init_attr ia2 = ia;
		ia2.send_cq = ia2.recv_cq = ibv_cq_ex_to_cq(cqx);
		struct ibv_qp *q2 = ibv_create_qp(pd, &ia2);
		CHECK(q2, "qp on cq_ex");
		struct ibv_recv_wr r3 = { .wr_id = 33, .sg_list = &sge, .num_sge = 1 };
		qa.qp_state = IBV_QPS_INIT;
		CHECK(q2 && ibv_modify_qp(q2, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "q2 INIT");
		CHECK(q2 && ibv_post_recv(q2, &r3, &bad_r) == 0, "q2 recv");
		qa.qp_state = IBV_QPS_ERR;
		CHECK(q2 && ibv_modify_qp(q2, &qa, IBV_QP_STATE) == 0, "q2 ERR");
		int r = ENOENT;
		for (int i = 0; i < 1000 && r == ENOENT; i++)
			r = ibv_start_poll(cqx, &pattr);
		CHECK(r == 0 && cqx->wr_id == 33 && cqx->status == IBV_WC_WR_FLUSH_ERR
		      && ibv_wc_read_qp_num(cqx) == q2->qp_num, "flush through start_poll");
		if (r == 0) {
			CHECK(ibv_next_poll(cqx) == ENOENT, "one completion");
			ibv_end_poll(cqx);
		}
		CHECK(ibv_destroy_qp(q2) == 0, "destroy q2");
		CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0, "destroy cq_ex");
	}

	/* Multicast: UD QPs only, multicast GIDs only; attached, a QP cannot
	 * be destroyed (EBUSY, as the kernel's ib_destroy_qp). */
	{
		union ibv_gid mgid = { .raw = { [10] = 0xff, [11] = 0xff, 239, 9, 9, 9 } };
		union ibv_gid ucast = { .raw = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 } };
		struct ibv_qp_init_attr ua = ia;
		ua.qp_type = IBV_QPT_UD;
		struct ibv_qp *ud = ibv_create_qp(pd, &ua);
		CHECK(ud, "ud qp");
		struct ibv_device_attr da;
		CHECK(ibv_query_device(ctx, &da) == 0 && da.max_mcast_grp > 0 && da.max_mcast_qp_attach > 0
		      && da.max_total_mcast_qp_attach >= da.max_mcast_qp_attach, "multicast limits");
		CHECK(ibv_attach_mcast(qp, &mgid, 0) == EINVAL, "attach an RC QP");
		CHECK(ud && ibv_attach_mcast(ud, &ucast, 0) == EINVAL, "attach to a unicast GID");
		CHECK(ud && ibv_detach_mcast(ud, &mgid, 0) == EINVAL, "detach what is not attached");
		CHECK(ud && ibv_attach_mcast(ud, &mgid, 0) == 0, "attach");
		CHECK(ud && ibv_attach_mcast(ud, &mgid, 0) == 0, "attach twice: one copy, no error");
		CHECK(ud && ibv_destroy_qp(ud) == EBUSY, "destroy while attached");
		CHECK(ud && ibv_detach_mcast(ud, &mgid, 0) == 0, "detach");
		CHECK(ud && ibv_destroy_qp(ud) == 0, "destroy after detach");
	}

	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_qp(qp) == EINVAL, "destroy qp twice");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc");
	CHECK(ibv_close_device(ctx) == 0, "close");
	free(junk);
	free(buf);
	if (failures)
		return 1;
	printf("OK\n");
	return 0;
}
