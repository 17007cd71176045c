#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){ long n=argc>1?atol(argv[1]):100000; double s=0;
#pragma omp parallel
{ for(long i=0;i<n;i++){
#pragma omp barrier
  }
#pragma omp atomic
  s+=1; }
 printf("%g\n",s); return 0;}
