/* roce_guard.c: the RoCE region's layout and the guard every wire posts
 * through (pure functions; roce.h gives the layout). A post is refused
 * here, before any verb sees it, if one byte of it would leave its slot,
 * the flag area or either side's registered region, or if one write would
 * pass TF_ROCE_MAX_WRITE: a 9.6 MB post once faulted an HCA, so the cap
 * holds whatever the slot size. */
#include <stdio.h>
#include <string.h>

#include "fabric/roce.h"

size_t tf_roce_slot_bytes(uint32_t max_kb)
{
	size_t b = (size_t)max_kb * 1024;
	return (b + 4095) / 4096 * 4096;
}

size_t tf_roce_region_bytes(size_t slot)
{
	return TF_ROCE_DATA + 4 * slot;
}

tf_status tf_roce_slot_check(uint32_t max_kb)
{
	size_t slot = tf_roce_slot_bytes(max_kb);
	if (slot > TF_ROCE_MAX_WRITE)
		return tf_err(TF_ERR_CONFIG,
			      "TF_TP_MAILBOX_MAX_KB=%u: the RoCE slot would be %zu bytes, past the %zu-byte "
			      "cap on one RDMA write; set at most %zu (the value is never clamped)",
			      max_kb, slot, TF_ROCE_MAX_WRITE, TF_ROCE_MAX_WRITE / 1024);
	return TF_OK;
}

const char *tf_roce_refusal_name(enum tf_roce_refusal r)
{
	switch (r) {
	case TF_ROCE_POST_OK: return "ok";
	case TF_ROCE_BAD_POST: return "BadPost";
	case TF_ROCE_WRITE_TOO_LARGE: return "WriteTooLarge";
	case TF_ROCE_OUT_OF_REGION: return "OutOfRegion";
	}
	return "?";
}

static tf_status refuse(enum tf_roce_refusal r, enum tf_roce_refusal *why, const char *what,
			size_t a, size_t b)
{
	if (why)
		*why = r;
	return tf_err(r == TF_ROCE_BAD_POST ? TF_ERR_ARG : TF_ERR_RANGE, "%s: %s (%zu, %zu)",
		      tf_roce_refusal_name(r), what, a, b);
}

/* Whether [off, off + len) lies inside [lo, hi), without overflow. */
static bool inside(size_t off, size_t len, size_t lo, size_t hi)
{
	return off >= lo && off <= hi && len <= hi - off;
}

tf_status tf_roce_stripes(const struct tf_roce_post *p, struct tf_roce_stripe out[TF_ROCE_MAX_HCA],
			  enum tf_roce_refusal *why)
{
	if (why)
		*why = TF_ROCE_POST_OK;
	if (p->n_hca < 1 || p->n_hca > TF_ROCE_MAX_HCA)
		return refuse(TF_ROCE_BAD_POST, why, "a post needs 1 or 2 HCAs", (size_t)p->n_hca, TF_ROCE_MAX_HCA);
	if (p->slot != 0 && p->slot != 1)
		return refuse(TF_ROCE_BAD_POST, why, "a post goes to slot 0 or 1", (size_t)p->slot, 2);
	if (p->padded == 0 || p->padded % TF_ROCE_PACK)
		return refuse(TF_ROCE_BAD_POST, why, "a post is a non-zero multiple of 16 bytes", p->padded,
			      TF_ROCE_PACK);
	/* The cap first: a larger post is refused even in a slot that holds it. */
	if (p->padded > TF_ROCE_MAX_WRITE)
		return refuse(TF_ROCE_WRITE_TOO_LARGE, why, "post bytes over the write cap", p->padded,
			      TF_ROCE_MAX_WRITE);
	if (p->padded > p->slot_bytes || p->padded > p->peer_slot_bytes)
		return refuse(TF_ROCE_OUT_OF_REGION, why, "post bytes past the slot", p->padded,
			      p->slot_bytes < p->peer_slot_bytes ? p->slot_bytes : p->peer_slot_bytes);
	size_t packs = p->padded / TF_ROCE_PACK, per = packs / (size_t)p->n_hca;
	size_t extra = packs % (size_t)p->n_hca, off = 0;
	struct tf_roce_stripe tmp[TF_ROCE_MAX_HCA]; /* out is written only when all pass */
	/* The send slot here and the receive slot there. */
	size_t src_lo = TF_ROCE_DATA + (size_t)p->slot * p->slot_bytes;
	size_t dst_lo = TF_ROCE_DATA + 2 * p->peer_slot_bytes + (size_t)p->slot * p->peer_slot_bytes;
	for (int h = 0; h < p->n_hca; h++) {
		size_t len = (per + ((size_t)h < extra)) * TF_ROCE_PACK;
		struct tf_roce_stripe s = {src_lo + off, dst_lo + off, len,
					   TF_ROCE_FLAGS + (size_t)(2 * p->slot + h) * TF_ROCE_FLAG_LINE};
		if (len > TF_ROCE_MAX_WRITE)
			return refuse(TF_ROCE_WRITE_TOO_LARGE, why, "stripe bytes over the write cap", len,
				      TF_ROCE_MAX_WRITE);
		if (!inside(s.src_off, len, src_lo, src_lo + p->slot_bytes) ||
		    !inside(s.src_off, len, 0, p->region_len))
			return refuse(TF_ROCE_OUT_OF_REGION, why, "send range past the slot or region",
				      s.src_off + len, p->region_len);
		if (!inside(s.dst_off, len, dst_lo, dst_lo + p->peer_slot_bytes) ||
		    !inside(s.dst_off, len, 0, p->peer_region_len))
			return refuse(TF_ROCE_OUT_OF_REGION, why, "peer receive range past its slot or region",
				      s.dst_off + len, p->peer_region_len);
		if (!inside(s.flag_off, 4, TF_ROCE_FLAGS, TF_ROCE_DATA) ||
		    !inside(s.flag_off, 4, 0, p->peer_region_len))
			return refuse(TF_ROCE_OUT_OF_REGION, why, "peer flag word past the flag area or region",
				      s.flag_off, p->peer_region_len);
		tmp[h] = s;
		off += len;
	}
	memcpy(out, tmp, (size_t)p->n_hca * sizeof tmp[0]);
	return TF_OK;
}

size_t tf_roce_padded(size_t len)
{
	size_t p = (len + TF_ROCE_PACK - 1) / TF_ROCE_PACK * TF_ROCE_PACK;
	return p < TF_ROCE_PACK ? TF_ROCE_PACK : p;
}

size_t tf_roce_chunk_ops(size_t stride, size_t slot)
{
	return slot ? (stride + slot - 1) / slot : 0;
}

size_t tf_roce_chunk_len(uint32_t len, size_t c, size_t slot)
{
	size_t from = c * slot;
	if ((size_t)len <= from)
		return 0;
	size_t n = (size_t)len - from;
	return n < slot ? n : slot;
}
