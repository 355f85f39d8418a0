#!/bin/bash
# tools/gemv8-run.sh: the v8/v9 study of kernels/NOTES.md on a GPU host, run from the
# repository root with a folder G (default .gpu-gemv3) holding bin/tf-bench, gpu_exl3,
# tf.fatbin and rtlibs/ (tools: runtime-libs.sh): gpu_exl3 with v8 and with v9, then
# tf-bench kernels for v7 (the default), v8 and v9 ($TF_CUDA_EXL3_GEMV8=0, 1, 2), twice
# alternated, and the SASS op counts of v7/v8/v9 at b4 mul1 where cuobjdump is on the host;
# everything in one tarball $OUT/all.tgz. (Call 1 at 23:24 UTC ran v7, v8 and v8 at
# 8 blocks an SM instead of v9.)
G=${G:-.gpu-gemv3}; B=$G/bin/tf-bench; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$PWD/$G/rtlibs/lib
S=5120x2304,2304x5120,5120x1280,8192x5120,5120x129280
for v in 1 2; do
 ( TF_CUDA_EXL3_GEMV8=$v timeout 60 $G/gpu_exl3 > $R/test_g8_$v.txt 2>&1; echo "rc=$?" >> $R/test_g8_$v.txt )
 tail -n 3 $R/test_g8_$v.txt
done
for i in 1 2; do for v in 0 1 2; do
 TF_CUDA_EXL3_GEMV8=$v timeout 60 $B kernels -s $S -b 2,4 -r 1 -n 15 --no-cublas > $R/t_g8_${v}_$i.txt 2>&1
done; done
paste <(cut -c1-52 $R/t_g8_0_1.txt) <(cut -c40-52 $R/t_g8_1_1.txt) <(cut -c40-52 $R/t_g8_2_1.txt) \
      <(cut -c40-52 $R/t_g8_0_2.txt) <(cut -c40-52 $R/t_g8_1_2.txt) <(cut -c40-52 $R/t_g8_2_2.txt)
CO=$(ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$CO" ]; then for v in 7 8 9; do
 $CO -sass -fun tf_exl3_gemv${v}_b4_cb2 $G/tf.fatbin > $R/sass_v$v.txt 2>&1
 echo "v$v: $(grep -c -E '^\s+/\*[0-9a-f]{4}\*/' $R/sass_v$v.txt) instr"
done; fi
tar czf $OUT/all.tgz -C $R .
