plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "com.example.qnnsample"
    compileSdk = 35

    defaultConfig {
        applicationId = "com.example.qnnsample"
        minSdk = 24
        targetSdk = 35
        versionCode = 1
        versionName = "1.0"
    }

    buildTypes {
        release {
            isMinifyEnabled = false
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }

    kotlinOptions {
        jvmTarget = "17"
    }
}

// The screen: ComponentActivity, a ViewModel holding its state (a StateFlow) across rotations, and coroutines for
// the work off the main thread (qnndeploy/data/maven.json has each version's source).
dependencies {
    implementation("androidx.activity:activity-ktx:1.10.0")
    implementation("androidx.lifecycle:lifecycle-runtime-ktx:2.8.7")
    implementation("androidx.lifecycle:lifecycle-viewmodel-ktx:2.8.7")
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.10.1")
}

// The qnndeploy glue: ABI filter, jniLibs packaging, the bundle's assets, the QNN runtime and ONNX Runtime, all
// from the repositories of settings.gradle.kts (mavenCentral). ONNX Runtime (scaffold --ort-aar chooses the AAR):
// com.qualcomm.qti:onnxruntime-android-qnn:2.6.0 + com.microsoft.onnxruntime:onnxruntime-android:1.26.0 + qnn-runtime 2.50.0 (a set reported to work, not confirmed validated)
apply(from = "qnndeploy/qnndeploy.gradle")
