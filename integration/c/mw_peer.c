/*
 * mw_peer: a memory window between two processes, for interop with the
 * kernel's Soft-RoCE. Written for rxe's tests (not from rdma-core).
 *
 *   mw_peer server PORT GID_INDEX
 *   mw_peer client SERVER_IP PORT GID_INDEX
 *
 * The server binds a type 2 window over the second 4 KiB of its buffer with
 * a BIND_MW work request and gives the client the window's R_Key; the
 * client WRITEs 4 KiB through it; the server checks the bytes (and that the
 * rest of its buffer is untouched), invalidates the window with LOCAL_INV,
 * and the client's second WRITE must fail with a remote access error.
 * Both exit 0 only if all of that happened; each prints "mw_peer: OK".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 16384
#define WIN_OFF 4096
#define WIN_LEN 4096

struct info {
	uint32_t qpn, psn;
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
};

static void die(const char *what)
{
	fprintf(stderr, "mw_peer: %s failed: %s\n", what, strerror(errno));
	exit(2);
}

static void xfer(int fd, void *p, size_t n, int out)
{
	char *c = p;
	while (n) {
		ssize_t r = out ? write(fd, c, n) : read(fd, c, n);
		if (r <= 0)
			die(out ? "tcp write" : "tcp read");
		c += r;
		n -= r;
	}
}

static struct ibv_wc wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 2000000000L; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("poll_cq");
		if (n == 1)
			return wc;
		if (i % 1000 == 999)
			usleep(100);
	}
	fprintf(stderr, "mw_peer: no completion\n");
	exit(2);
}

static void to_rts(struct ibv_qp *qp, const struct info *me, const struct info *peer, int gidx)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static int tcp(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
		.ai_flags = host ? 0 : AI_PASSIVE }, *res;
	if (getaddrinfo(host, port, &hints, &res))
		die("getaddrinfo");
	int s = socket(res->ai_family, res->ai_socktype, 0), one = 1;
	if (s < 0)
		die("socket");
	if (host) {
		for (int i = 0; connect(s, res->ai_addr, res->ai_addrlen); i++) {
			if (i == 100)
				die("connect");
			usleep(100000);
		}
		freeaddrinfo(res);
		return s;
	}
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(s, res->ai_addr, res->ai_addrlen) || listen(s, 1))
		die("bind/listen");
	freeaddrinfo(res);
	int c = accept(s, NULL, NULL);
	if (c < 0)
		die("accept");
	close(s);
	return c;
}

int main(int argc, char **argv)
{
	int server = argc == 4 && !strcmp(argv[1], "server");
	if (!server && !(argc == 5 && !strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: mw_peer server PORT GIDX | client IP PORT GIDX\n");
		return 2;
	}
	int gidx = atoi(argv[argc - 1]);
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1)
		die("get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	char *buf = calloc(1, BUF);
	struct ibv_mr *mr = cq ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND) : NULL;
	if (!mr)
		die("pd/cq/reg_mr");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("create_qp");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("query_gid");
	struct info me = { .qpn = qp->qp_num, .psn = (uint32_t)(getpid() * 7919) & 0xffffff }, peer;
	memcpy(me.gid, gid.raw, 16);
	int s = server ? tcp(NULL, argv[2]) : tcp(argv[2], argv[3]);
	xfer(s, &me, sizeof me, 1);
	xfer(s, &peer, sizeof peer, 0);
	to_rts(qp, &me, &peer, gidx);
	char step;

	if (server) {
		struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		if (!mw)
			die("alloc_mw type 2");
		uint32_t rkey = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = rkey;
		wr.bind_mw.bind_info.mr = mr;
		wr.bind_mw.bind_info.addr = (uintptr_t)buf + WIN_OFF;
		wr.bind_mw.bind_info.length = WIN_LEN;
		wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		if (ibv_post_send(qp, &wr, &bad))
			die("post BIND_MW");
		struct ibv_wc wc = wait_one(cq);
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_BIND_MW) {
			fprintf(stderr, "mw_peer: bind completed %s (opcode %d)\n", ibv_wc_status_str(wc.status), wc.opcode);
			return 1;
		}
		struct info win = { .addr = (uintptr_t)buf + WIN_OFF, .rkey = rkey };
		xfer(s, &win, sizeof win, 1);
		xfer(s, &step, 1, 0); /* the client wrote */
		int bad_bytes = 0;
		for (int i = 0; i < BUF; i++) {
			char want = i >= WIN_OFF && i < WIN_OFF + WIN_LEN ? (char)('w' ^ (i - WIN_OFF)) : 0;
			bad_bytes += buf[i] != want;
		}
		if (bad_bytes) {
			fprintf(stderr, "mw_peer: %d bytes wrong after the WRITE through the window\n", bad_bytes);
			return 1;
		}
		struct ibv_send_wr inv = { .wr_id = 2, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED };
		inv.invalidate_rkey = rkey;
		if (ibv_post_send(qp, &inv, &bad))
			die("post LOCAL_INV");
		wc = wait_one(cq);
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_LOCAL_INV) {
			fprintf(stderr, "mw_peer: LOCAL_INV completed %s\n", ibv_wc_status_str(wc.status));
			return 1;
		}
		step = '2';
		xfer(s, &step, 1, 1);
		xfer(s, &step, 1, 0); /* the client's second WRITE failed */
		printf("mw_peer: window rkey 0x%x written through, then invalidated: OK\n", rkey);
		return 0;
	}

	struct info win;
	xfer(s, &win, sizeof win, 0);
	for (int i = 0; i < WIN_LEN; i++)
		buf[i] = (char)('w' ^ i);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = WIN_LEN, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 3, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = win.addr;
	wr.wr.rdma.rkey = win.rkey;
	if (ibv_post_send(qp, &wr, &bad))
		die("post WRITE");
	struct ibv_wc wc = wait_one(cq);
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "mw_peer: WRITE through the window: %s\n", ibv_wc_status_str(wc.status));
		return 1;
	}
	step = '1';
	xfer(s, &step, 1, 1);
	xfer(s, &step, 1, 0); /* invalidated */
	wr.wr_id = 4;
	if (ibv_post_send(qp, &wr, &bad))
		die("post second WRITE");
	wc = wait_one(cq);
	step = '3';
	xfer(s, &step, 1, 1);
	if (wc.status != IBV_WC_REM_ACCESS_ERR) {
		fprintf(stderr, "mw_peer: WRITE after LOCAL_INV: %s, not a remote access error\n",
			ibv_wc_status_str(wc.status));
		return 1;
	}
	printf("mw_peer: WRITE through rkey 0x%x, then refused after invalidation: OK\n", win.rkey);
	return 0;
}
