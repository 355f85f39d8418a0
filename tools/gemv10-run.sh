#!/bin/bash
# tools/gemv10-run.sh: the v10 study of kernels/NOTES.md (one-row MUL1 GEMV on the
# int8 tensor cores) on a GPU host, run from the repository root with a folder G
# (default .gpu-gemv10) holding bin/tf-bench, gpu_exl3, tf.fatbin and rtlibs/
# (tools: runtime-libs.sh): gpu_exl3 with v10 (the default for MUL1 at one row) and
# with v7 (TF_CUDA_EXL3_VARIANT=no-v10); tf-bench kernels for v7, v10 and v10 as a
# programmatic dependent launch (pdl-all), twice alternated; the experts
# launch (6 experts a launch) for v7 and v10; the SASS op counts where cuobjdump is
# on the host; and Nsight Compute's warp-stall samples of v10 on the expert and head
# shapes at 4 bits. Everything lands in one tarball, $OUT/all.tgz.
G=${G:-.gpu-gemv10}; B=$G/bin/tf-bench; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$PWD/$G/rtlibs/lib
S=${S:-5120x2304,2304x5120,5120x1280,1280x32768,4096x1024,8192x5120,5120x129280}
var() { case $1 in 0) echo no-v10;; 1) echo tuned;; p) echo pdl-all;; esac; }
for v in 1 0; do
 ( TF_CUDA_EXL3_VARIANT=$(var $v) timeout 100 $G/gpu_exl3 > $R/test_g10_$v.txt 2>&1; echo "rc=$?" >> $R/test_g10_$v.txt )
 tail -n 5 $R/test_g10_$v.txt
done
for i in 1 2; do for v in 0 1 p; do
 TF_CUDA_EXL3_VARIANT=$(var $v) timeout 90 $B kernels -s $S -b 2,4 -r 1 -n 15 --no-cublas > $R/t_g10_${v}_$i.txt 2>&1
done; done
echo "v7 | v10 | v10+PDL (run 1), then run 2"
paste <(cut -c1-60 $R/t_g10_0_1.txt) <(cut -c40-60 $R/t_g10_1_1.txt) <(cut -c40-60 $R/t_g10_p_1.txt) \
      <(cut -c40-60 $R/t_g10_0_2.txt) <(cut -c40-60 $R/t_g10_1_2.txt) <(cut -c40-60 $R/t_g10_p_2.txt)
for v in 0 1; do
 TF_CUDA_EXL3_VARIANT=$(var $v) timeout 60 $B kernels -s 5120x2304,2304x5120,5120x1280 -b 2,4 -r 1 --experts 6 -n 15 \
   --no-cublas > $R/t_experts_$v.txt 2>&1
 echo "experts, TF_CUDA_EXL3_VARIANT=$(var $v)"; cat $R/t_experts_$v.txt
done
CO=$(ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$CO" ]; then for k in gemv10_b4 gemv10_b2; do
 $CO -sass -fun tf_exl3_${k}_cb2 $G/tf.fatbin > $R/sass_$k.txt 2>&1
 echo "$k: $(grep -c -E '^\s+/\*[0-9a-f]{4}\*/' $R/sass_$k.txt) instr"
done; fi
NCU=$(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ -z "$NO_NCU" ]; then for sh in 5120x2304 8192x5120 5120x129280; do
 n=v10_${sh}_b4
 timeout 60 $NCU --set full -k regex:tf_exl3_gemv10_b4_cb2 --launch-skip 4 --launch-count 1 -f -o $R/$n \
    $B kernels -s $sh -b 4 -r 1 -n 3 --no-cublas > $R/$n.log 2>&1
 $NCU --import $R/$n.ncu-rep --page details > $R/$n.txt 2>&1
 $NCU --import $R/$n.ncu-rep --page source --csv --print-source sass > $R/${n}_src.csv 2>&1
 rm -f $R/$n.ncu-rep
 echo "== $n"; grep -E "^\s+(Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Executed Instructions  )" $R/$n.txt | head -6
done; fi
tar czf $OUT/all.tgz -C $R .
