/* What the C tests that connect two RC QPs of one device to each other
 * share: the CHECK macro and its failure count, opening the one device,
 * one CQ and a bounded wait for a completion on it (unless
 * RC_LOOP_OWN_CQS), and RESET->INIT->RTR->RTS over GID 0 (both
 * PSNs 0x100, path MTU 1024, one READ/atomic each way). Include it after
 * <infiniband/verbs.h>, <errno.h>, <stdio.h> and <string.h>. */
#ifndef RXE_TEST_RC_LOOP_H
#define RXE_TEST_RC_LOOP_H

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL line %d: ", __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); failures++; } } while (0)

/* A test with CQs of its own defines RC_LOOP_OWN_CQS first. */
#ifndef RC_LOOP_OWN_CQS
static struct ibv_cq *cq;

/* One completion, or a zeroed wc with status -1 after about 10 s. */
static struct ibv_wc wait_wc(void)
{
	struct ibv_wc wc;
	for (long i = 0; i < 100000000L; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n == 1)
			return wc;
		if (n < 0)
			break;
	}
	memset(&wc, 0, sizeof wc);
	wc.status = (enum ibv_wc_status)-1;
	return wc;
}
#endif

/* The one device the test runs with, opened; NULL (counted) otherwise. */
static struct ibv_context *open_only_device(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1, "device list: %d", n);
	if (!list || n < 1)
		return NULL;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open: %d", errno);
	ibv_free_device_list(list);
	return ctx;
}

/* Connects qp to QP dest at gid, granting the peer `access`. */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = access };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0x100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x100;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

#endif
