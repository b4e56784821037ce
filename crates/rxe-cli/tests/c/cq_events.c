/* Completion events through rxe's libibverbs.so.1 from a C program
 * compiled against rdma-core's own verbs.h: two RC QPs of one device
 * connected to each other, QP b's receive CQ on a completion channel.
 * - a thread asleep in ibv_get_cq_event (long past rxe's short spin) is
 *   woken by a receive completion on the armed CQ, and gets that CQ and
 *   its cq_context;
 * - a waiter that comes while the message is on its way (the spin) gets it;
 * - a completion on an unarmed CQ raises no event: the fd stays
 *   unreadable and a non-blocking ibv_get_cq_event fails with EAGAIN;
 * - armed solicited-only, an unsolicited SEND raises none, a solicited one
 *   does (IBTA 11.4.2.2).
 * Run under `rxe exec --ip ADDR`. Prints OK at the end. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define RC_LOOP_OWN_CQS
#include "rc_loop.h"

static struct ibv_cq *scq, *rcq;
static struct ibv_comp_channel *ch;
static struct ibv_qp *qa, *qb;
static struct ibv_mr *mr;
static char *buf;
static void *const RCQ_CONTEXT = (void *)0xbeef;

/* One completion of `cq`, or a wc with status -1 after about 10 s. */
static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 100000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n == 1)
			return wc;
		if (n < 0)
			break;
		usleep(100);
	}
	memset(&wc, 0, sizeof wc);
	wc.status = (enum ibv_wc_status)-1;
	return wc;
}

static void post_recv(uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf + 2048, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qb, &wr, &bad) == 0, "post_recv %d", errno);
}

/* QP a sends 64 bytes; its send completion is taken here. */
static void send_from_a(uint64_t id, unsigned flags)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | flags }, *bad;
	CHECK(ibv_post_send(qa, &wr, &bad) == 0, "post_send %d", errno);
	struct ibv_wc wc = wait_wc(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id, "send %lu: status %d", (unsigned long)id, wc.status);
}

/* The channel has no event now, nor within 300 ms. */
static void no_event(const char *what)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 300) == 0, "%s: the channel fd is readable", what);
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_cq *c;
	void *cc;
	errno = 0;
	int r = ibv_get_cq_event(ch, &c, &cc);
	CHECK(r == -1 && errno == EAGAIN, "%s: an event (errno %d)", what, errno);
	if (r == 0)
		ibv_ack_cq_events(c, 1); /* or ibv_destroy_cq waits for it */
	fcntl(ch->fd, F_SETFL, fl);
}

static volatile int woken;
static struct ibv_cq *ev_cq;
static void *ev_ctx;

static void *waiter(void *arg)
{
	(void)arg;
	int r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	__atomic_store_n(&woken, r == 0 ? 1 : -1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(void)
{
	struct ibv_context *ctx = open_only_device();
	if (!ctx)
		return 1;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	ch = ibv_create_comp_channel(ctx);
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 64, RCQ_CONTEXT, ch, 0);
	if (!pd || !ch || !scq || !rcq)
		return 1;
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qa = ibv_create_qp(pd, &ia);
	ia.recv_cq = rcq;
	qb = ibv_create_qp(pd, &ia);
	if (!qa || !qb)
		return 1;
	CHECK(connect_qp(qa, qb->qp_num, &gid, 0) == 0, "connect a");
	CHECK(connect_qp(qb, qa->qp_num, &gid, 0) == 0, "connect b");
	buf = calloc(1, 4096);
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return 1;

	/* 1. A thread asleep in ibv_get_cq_event is woken. */
	post_recv(1);
	CHECK(ibv_req_notify_cq(rcq, 0) == 0, "arm");
	pthread_t t;
	CHECK(pthread_create(&t, NULL, waiter, NULL) == 0, "thread");
	usleep(200 * 1000);
	CHECK(__atomic_load_n(&woken, __ATOMIC_SEQ_CST) == 0, "an event before any completion");
	send_from_a(11, 0);
	for (int i = 0; i < 1000 && !__atomic_load_n(&woken, __ATOMIC_SEQ_CST); i++)
		usleep(10 * 1000);
	if (__atomic_load_n(&woken, __ATOMIC_SEQ_CST) != 1) {
		fprintf(stderr, "FAIL: a completion on an armed CQ did not wake the waiter (%d)\n", woken);
		return 1;
	}
	pthread_join(t, NULL);
	CHECK(ev_cq == rcq && ev_ctx == RCQ_CONTEXT, "event of cq %p ctx %p", (void *)ev_cq, ev_ctx);
	ibv_ack_cq_events(rcq, 1);
	struct ibv_wc wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.opcode == IBV_WC_RECV, "recv 1: %d", wc.status);

	/* 2. A waiter that comes while the message is on its way. */
	post_recv(2);
	CHECK(ibv_req_notify_cq(rcq, 0) == 0, "arm");
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 12, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(qa, &swr, &bad) == 0, "post_send");
	ev_cq = NULL;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq, "event 2: %d", errno);
	ibv_ack_cq_events(rcq, 1);
	wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "recv 2: %d", wc.status);
	wc = wait_wc(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 12, "send 12: %d", wc.status);

	/* 3. Not armed: the completion arrives, no event. */
	post_recv(3);
	send_from_a(13, 0);
	wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3, "recv 3: %d", wc.status);
	no_event("unarmed");

	/* 4. Solicited only: an unsolicited SEND raises nothing, a solicited one does. */
	post_recv(4);
	post_recv(5);
	CHECK(ibv_req_notify_cq(rcq, 1) == 0, "arm solicited");
	send_from_a(14, 0);
	wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4, "recv 4: %d", wc.status);
	no_event("solicited only, unsolicited SEND");
	send_from_a(15, IBV_SEND_SOLICITED);
	ev_cq = NULL;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == rcq, "event 5: %d", errno);
	ibv_ack_cq_events(rcq, 1);
	wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5, "recv 5: %d", wc.status);

	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "destroy qps");
	CHECK(ibv_destroy_cq(rcq) == 0 && ibv_destroy_cq(scq) == 0, "destroy cqs");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	if (failures)
		return 1;
	printf("OK\n");
	return 0;
}
