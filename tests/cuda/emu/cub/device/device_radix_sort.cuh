/* emu: cub::DeviceRadixSort::SortPairs as a host stable sort (same result:
 * CUB's radix sort is stable and orders signed keys as signed). */
#ifndef PIPIT_EMU_CUB_SORT_H
#define PIPIT_EMU_CUB_SORT_H

#include <algorithm>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

namespace cub {
struct DeviceRadixSort {
    template <class K, class V, class N>
    static cudaError_t SortPairs(void *tmp, size_t &bytes, const K *kin, K *kout, const V *vin, V *vout, N n,
                                 int begin_bit = 0, int end_bit = (int)sizeof(K) * 8, cudaStream_t s = nullptr) {
        (void)begin_bit, (void)end_bit, (void)s;
        if (!tmp) {
            bytes = 64;
            return cudaSuccess;
        }
        std::vector<std::pair<K, V>> kv((size_t)n);
        for (size_t i = 0; i < (size_t)n; i++) kv[i] = {kin[i], vin[i]};
        std::stable_sort(kv.begin(), kv.end(), [](const std::pair<K, V> &a, const std::pair<K, V> &b) {
            return a.first < b.first;
        });
        for (size_t i = 0; i < (size_t)n; i++) kout[i] = kv[i].first, vout[i] = kv[i].second;
        return cudaSuccess;
    }
};
} // namespace cub

#endif
