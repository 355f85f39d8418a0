#!/bin/bash
# tools/gemv-profile.sh: the one-row EXL3 GEMV study of kernels/NOTES.md v7, run on
# a GPU host from a folder G (default .gpu-gemv2) holding bin/ (tf-bench), gpu_exl3 and
# rtlibs/ (tools: runtime-libs.sh): correctness of v1 and v7, v1/v7 timings twice
# alternated, and ncu --set full of v1 and v7 on the expert and head shapes; everything
# in one tarball $OUT/all.tgz. (v7 is the default now; the 23:01 UTC run had v1 as the
# default, and also profiled the v5 kernel, since removed.)
export LD_LIBRARY_PATH=$PWD/${G:-.gpu-gemv2}/rtlibs/lib
G=${G:-.gpu-gemv2}; B=$G/bin/tf-bench; R=/tmp/r; mkdir -p $R
S=5120x2304,2304x5120,5120x1280,1280x32768,4096x1024,8192x5120,5120x129280
( TF_CUDA_EXL3_VARIANT=no-v10,no-v7 timeout 100 $G/gpu_exl3 > $R/test_v1.txt 2>&1; echo "rc=$?" >> $R/test_v1.txt ) 
( TF_CUDA_EXL3_VARIANT=no-v10 timeout 100 $G/gpu_exl3 > $R/test_v7.txt 2>&1; echo "rc=$?" >> $R/test_v7.txt )
tail -n 3 $R/test_v1.txt $R/test_v7.txt
for i in 1 2; do
 TF_CUDA_EXL3_VARIANT=no-v10,no-v7 timeout 90 $B kernels -s $S -b 2,4 -r 1 -n 15 --no-cublas > $R/t_v1_$i.txt 2>&1
 TF_CUDA_EXL3_VARIANT=no-v10 timeout 90 $B kernels -s $S -b 2,4 -r 1 -n 15 --no-cublas > $R/t_v7_$i.txt 2>&1
done
paste <(cut -c1-60 $R/t_v1_1.txt) <(cut -c23-60 $R/t_v7_1.txt) <(cut -c23-60 $R/t_v1_2.txt) <(cut -c23-60 $R/t_v7_2.txt)
NCU=/opt/nvidia/nsight-compute/2025.3.1/ncu
for sh in 5120x2304 5120x129280; do for b in 4 2; do for v in 1 7; do
  case $v in 1) k=tf_exl3_gemv_b${b}_cb2_r1;; 7) k=tf_exl3_gemv7_b${b}_cb2;; esac
  e7=no-v10,no-v7; [ $v = 7 ] && e7=no-v10
  n=v${v}_${sh}_b$b
  TF_CUDA_EXL3_VARIANT=$e7 timeout 60 $NCU --set full -k regex:$k --launch-skip 4 --launch-count 1 -f -o $R/$n \
     $B kernels -s $sh -b $b -r 1 -n 3 --no-cublas > $R/$n.log 2>&1
  $NCU --import $R/$n.ncu-rep --page details > $R/$n.txt 2>&1
  $NCU --import $R/$n.ncu-rep --page raw --csv > $R/${n}_raw.csv 2>&1
  [ $b = 4 ] && [ $v != 7 ] && $NCU --import $R/$n.ncu-rep --page source --csv --print-source sass > $R/${n}_src.csv 2>&1
  rm -f $R/$n.ncu-rep
done; done; done
tar czf $OUT/all.tgz -C $R .
ls -la $OUT
for f in $R/v*_b4.txt; do echo "== $f"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Eligible Warps|No Eligible|Active Warps Per" $f | head -14; done
