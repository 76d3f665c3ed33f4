/* An MPI program run unchanged on Weft: Open MPI's OFI MTL (`--mca pml cm --mca mtl ofi`) over
 * the provider `weft`. Blocking and non-blocking point-to-point from 0 B to 8 MiB, ANY_SOURCE and
 * ANY_TAG, Probe, Iprobe, Mprobe, Cancel, Ssend/Issend, and Allreduce, Bcast, Alltoall,
 * Allgather, Reduce_scatter, every byte and every status checked. Any failed check prints what
 * differed and aborts the job (non-zero exit); rank 0 prints "mpi_test: PASS" at the end. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "mpi_test rank %d: %s:%d: check failed: %s: ", rank, __FILE__, __LINE__, \
              #cond);                                                                          \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fprintf(stderr, "\n");                                                                   \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                            \
    }                                                                                          \
  } while (0)

/* The byte a message from `src` with `tag` carries at offset i. */
static unsigned char pattern(size_t i, int src, int tag) {
  return (unsigned char)(i * 131u + (size_t)src * 17u + (size_t)tag * 7u + (i >> 8));
}

static void fill(unsigned char* buf, size_t len, int src, int tag) {
  for (size_t i = 0; i < len; i++) buf[i] = pattern(i, src, tag);
}

static void verify(const unsigned char* buf, size_t len, int src, int tag, const char* what) {
  for (size_t i = 0; i < len; i++)
    CHECK(buf[i] == pattern(i, src, tag), "%s: %zu bytes from %d tag %d: byte %zu is %u, want %u",
          what, len, src, tag, i, buf[i], pattern(i, src, tag));
}

static void check_status(const MPI_Status* st, int src, int tag, size_t len, const char* what) {
  int count = -1;
  MPI_Get_count(st, MPI_BYTE, &count);
  CHECK(st->MPI_SOURCE == src, "%s: source %d, want %d", what, st->MPI_SOURCE, src);
  CHECK(st->MPI_TAG == tag, "%s: tag %d, want %d", what, st->MPI_TAG, tag);
  CHECK(count == (int)len, "%s: count %d, want %zu", what, count, len);
}

static const size_t sizes[] = {0, 1, 8, 64, 1000, 4096, 4097, 65536, 1u << 20, 3u << 20, 8u << 20};
enum { nsizes = sizeof(sizes) / sizeof(sizes[0]) };

/* Ring: Isend to the right, blocking Recv from the left, then Wait. */
static void ring(unsigned char* sbuf, unsigned char* rbuf) {
  int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
  for (int k = 0; k < nsizes; k++) {
    size_t len = sizes[k];
    int tag = 10 + k;
    fill(sbuf, len, rank, tag);
    memset(rbuf, 0xEE, len + 1);
    MPI_Request req;
    MPI_Status st;
    MPI_Isend(sbuf, (int)len, MPI_BYTE, right, tag, MPI_COMM_WORLD, &req);
    MPI_Recv(rbuf, (int)len + 1, MPI_BYTE, left, tag, MPI_COMM_WORLD, &st);
    check_status(&st, left, tag, len, "ring recv");
    verify(rbuf, len, left, tag, "ring recv");
    CHECK(rbuf[len] == 0xEE, "ring recv: byte after the message overwritten (%zu)", len);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  }
}

/* Pairs (0,1), (2,3), ...: blocking Send/Recv both ways, even rank first. */
static void pairs(unsigned char* sbuf, unsigned char* rbuf) {
  int peer = rank ^ 1;
  if (peer >= nranks) return;
  for (int k = 0; k < nsizes; k++) {
    size_t len = sizes[k];
    MPI_Status st;
    for (int turn = 0; turn < 2; turn++) {
      int sending = ((rank & 1) == turn);
      if (sending) {
        fill(sbuf, len, rank, 200 + k);
        MPI_Send(sbuf, (int)len, MPI_BYTE, peer, 200 + k, MPI_COMM_WORLD);
      } else {
        MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, 200 + k, MPI_COMM_WORLD, &st);
        check_status(&st, peer, 200 + k, len, "pair recv");
        verify(rbuf, len, peer, 200 + k, "pair recv");
      }
    }
  }
}

/* Everyone sends to rank 0 with tag 300+src; rank 0 takes them with ANY_SOURCE/ANY_TAG. On a
 * communicator of their own, so that later traffic on MPI_COMM_WORLD cannot match. */
static void any_source(unsigned char* sbuf, unsigned char* rbuf) {
  size_t len = 5000;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rank != 0) {
    fill(sbuf, len + (size_t)rank, rank, 300 + rank);
    MPI_Send(sbuf, (int)(len + (size_t)rank), MPI_BYTE, 0, 300 + rank, comm);
    MPI_Comm_free(&comm);
    return;
  }
  int seen[64] = {0};
  for (int i = 1; i < nranks; i++) {
    MPI_Status st;
    MPI_Recv(rbuf, (int)(len + 64), MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st);
    int src = st.MPI_SOURCE;
    CHECK(src > 0 && src < nranks && !seen[src], "any_source: source %d", src);
    seen[src] = 1;
    check_status(&st, src, 300 + src, len + (size_t)src, "any_source");
    verify(rbuf, len + (size_t)src, src, 300 + src, "any_source");
  }
  MPI_Comm_free(&comm);
}

/* Probe, Iprobe (a miss first), Mprobe/Mrecv and Improbe between ranks 1 and 0. */
static void probes(unsigned char* sbuf, unsigned char* rbuf) {
  if (rank == 1) {
    const size_t lens[] = {3000, 70000, 12, 1u << 20};
    for (int i = 0; i < 4; i++) {
      fill(sbuf, lens[i], rank, 400 + i);
      MPI_Send(sbuf, (int)lens[i], MPI_BYTE, 0, 400 + i, MPI_COMM_WORLD);
    }
  } else if (rank == 0) {
    MPI_Status st;
    int flag = 1, count = 0;
    /* Nobody ever sends tag 499: a miss. */
    MPI_Iprobe(1, 499, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag == 0, "Iprobe of an unsent tag found a message");
    /* Probe */
    MPI_Probe(1, 400, MPI_COMM_WORLD, &st);
    check_status(&st, 1, 400, 3000, "Probe");
    MPI_Get_count(&st, MPI_BYTE, &count);
    MPI_Recv(rbuf, count, MPI_BYTE, 1, 400, MPI_COMM_WORLD, &st);
    verify(rbuf, 3000, 1, 400, "Probe recv");
    /* Iprobe until it is there */
    flag = 0;
    while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 401, MPI_COMM_WORLD, &flag, &st);
    check_status(&st, 1, 401, 70000, "Iprobe");
    MPI_Recv(rbuf, 70000, MPI_BYTE, 1, 401, MPI_COMM_WORLD, &st);
    verify(rbuf, 70000, 1, 401, "Iprobe recv");
    /* Mprobe / Mrecv */
    MPI_Message msg;
    MPI_Mprobe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
    check_status(&st, 1, 402, 12, "Mprobe");
    MPI_Mrecv(rbuf, 12, MPI_BYTE, &msg, &st);
    check_status(&st, 1, 402, 12, "Mrecv");
    verify(rbuf, 12, 1, 402, "Mrecv");
    /* Improbe */
    flag = 0;
    while (!flag) MPI_Improbe(1, 403, MPI_COMM_WORLD, &flag, &msg, &st);
    check_status(&st, 1, 403, 1u << 20, "Improbe");
    MPI_Request req;
    MPI_Imrecv(rbuf, 1 << 20, MPI_BYTE, &msg, &req);
    MPI_Wait(&req, &st);
    verify(rbuf, 1u << 20, 1, 403, "Imrecv");
  }
}

/* Cancel a receive nobody matches; Ssend/Issend completes only once the receive is posted. */
static void cancel_and_ssend(unsigned char* sbuf, unsigned char* rbuf) {
  MPI_Request req;
  MPI_Status st;
  int cancelled = 0;
  MPI_Irecv(rbuf, 16, MPI_BYTE, MPI_ANY_SOURCE, 599, MPI_COMM_WORLD, &req);
  MPI_Cancel(&req);
  MPI_Wait(&req, &st);
  MPI_Test_cancelled(&st, &cancelled);
  CHECK(cancelled, "the cancelled receive was not cancelled");

  if (rank == 1) {
    int flag = 1, token = 42;
    fill(sbuf, 100, rank, 500);
    MPI_Issend(sbuf, 100, MPI_BYTE, 0, 500, MPI_COMM_WORLD, &req);
    /* Rank 0 posts its receive only after the token: the Issend cannot be complete yet. */
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 0, "Issend completed before the receiver posted its receive");
    MPI_Send(&token, 1, MPI_INT, 0, 501, MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    fill(sbuf, 200000, rank, 502);
    MPI_Ssend(sbuf, 200000, MPI_BYTE, 0, 502, MPI_COMM_WORLD);
  } else if (rank == 0) {
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, 1, 501, MPI_COMM_WORLD, &st);
    CHECK(token == 42, "token %d", token);
    MPI_Recv(rbuf, 100, MPI_BYTE, 1, 500, MPI_COMM_WORLD, &st);
    check_status(&st, 1, 500, 100, "Issend recv");
    verify(rbuf, 100, 1, 500, "Issend recv");
    MPI_Recv(rbuf, 200000, MPI_BYTE, 1, 502, MPI_COMM_WORLD, &st);
    check_status(&st, 1, 502, 200000, "Ssend recv");
    verify(rbuf, 200000, 1, 502, "Ssend recv");
  }
}

static void collectives(void) {
  /* Allreduce: int sum (1 and 100000 elements), double max. */
  enum { N = 100000 };
  int* iv = malloc(N * sizeof(int));
  int* ir = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) iv[i] = rank * 1000 + i;
  MPI_Allreduce(iv, ir, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < N; i++) {
    int want = 1000 * nranks * (nranks - 1) / 2 + i * nranks;
    CHECK(ir[i] == want, "Allreduce sum [%d] = %d, want %d", i, ir[i], want);
  }
  double dv = rank * 0.5 + 1.25, dr = 0;
  MPI_Allreduce(&dv, &dr, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(dr == (nranks - 1) * 0.5 + 1.25, "Allreduce max %g", dr);

  /* Bcast 1 MiB + 3 from root nranks-1. */
  size_t blen = (1u << 20) + 3;
  unsigned char* b = malloc(blen);
  int root = nranks - 1;
  if (rank == root)
    fill(b, blen, root, 600);
  else
    memset(b, 0, blen);
  MPI_Bcast(b, (int)blen, MPI_BYTE, root, MPI_COMM_WORLD);
  verify(b, blen, root, 600, "Bcast");
  free(b);

  /* Alltoall: 1000 ints per pair; element j of the block for rank d = src*1e6 + d*1000 + j. */
  enum { B = 1000 };
  int* as = malloc((size_t)nranks * B * sizeof(int));
  int* ar = malloc((size_t)nranks * B * sizeof(int));
  for (int d = 0; d < nranks; d++)
    for (int j = 0; j < B; j++) as[d * B + j] = rank * 1000000 + d * 1000 + j;
  MPI_Alltoall(as, B, MPI_INT, ar, B, MPI_INT, MPI_COMM_WORLD);
  for (int s = 0; s < nranks; s++)
    for (int j = 0; j < B; j++) {
      int want = s * 1000000 + rank * 1000 + j;
      CHECK(ar[s * B + j] == want, "Alltoall from %d [%d] = %d, want %d", s, j, ar[s * B + j],
            want);
    }

  /* Allgather: B ints each. */
  for (int j = 0; j < B; j++) as[j] = rank * 7919 + j;
  MPI_Allgather(as, B, MPI_INT, ar, B, MPI_INT, MPI_COMM_WORLD);
  for (int s = 0; s < nranks; s++)
    for (int j = 0; j < B; j++)
      CHECK(ar[s * B + j] == s * 7919 + j, "Allgather from %d [%d] = %d", s, j, ar[s * B + j]);

  /* Reduce_scatter: rank r gets r+1 elements; element i of the full vector sums rank*3 + i. */
  int total = nranks * (nranks + 1) / 2;
  int* counts = malloc((size_t)nranks * sizeof(int));
  int* rv = malloc((size_t)total * sizeof(int));
  int* rr = malloc((size_t)(nranks + 1) * sizeof(int));
  for (int r = 0; r < nranks; r++) counts[r] = r + 1;
  for (int i = 0; i < total; i++) rv[i] = rank * 3 + i;
  MPI_Reduce_scatter(rv, rr, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int first = rank * (rank + 1) / 2;
  for (int i = 0; i < rank + 1; i++) {
    int want = 3 * nranks * (nranks - 1) / 2 + (first + i) * nranks;
    CHECK(rr[i] == want, "Reduce_scatter [%d] = %d, want %d", i, rr[i], want);
  }
  free(counts);
  free(rv);
  free(rr);
  free(as);
  free(ar);
  free(iv);
  free(ir);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  CHECK(nranks >= 2 && nranks <= 64, "run with 2 to 64 ranks, not %d", nranks);
  size_t max = (8u << 20) + 64;
  unsigned char* sbuf = malloc(max);
  unsigned char* rbuf = malloc(max);
  CHECK(sbuf && rbuf, "out of memory");

  ring(sbuf, rbuf);
  pairs(sbuf, rbuf);
  any_source(sbuf, rbuf);
  probes(sbuf, rbuf);
  cancel_and_ssend(sbuf, rbuf);
  collectives();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_test: PASS on %d ranks\n", nranks);
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}
